"""S3-compatible object storage (MinIO, AWS S3, Garage, Ceph), shared by the artifact store and,
later, audit export and memory sync. `settings` names the bucket; `s3` talks to it."""
