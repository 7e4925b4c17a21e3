#!/bin/sh
# bloom-backup: what BLOOM Runtime cannot rebuild, copied into one new directory (docs/backup.md).
#
#   bloom-backup DEST        writes DEST/bloom-<UTC time>/ (mode 0700) and prints its path
#
#   runtime.pgdump | runtime.db      the runtime's database: tasks, leases, results, artifacts'
#                                    rows, audit, keys, users, stored config (pg_dump -Fc, or a
#                                    consistent copy of SQLite's file taken while it runs)
#   membridge.pgdump | membridge.db  Membridge's database, the same way
#   secret.key                       the runtime's secret (login cookies; the stored Membridge
#                                    key is encrypted with it), unless BLOOM_SECRET_KEY is set
#   env/                             the env files: every other secret
#   artifacts.tar                    artifact files (BLOOM_ARTIFACT_STORE=fs)
#   bucket/                          the MinIO bucket (artifacts, audit exports), with rclone,
#                                    object metadata kept (rclone --metadata)
#   SHA256SUMS, VERSION              what was copied, and by which bloom and schema
#
# The databases first, the bucket last: the bucket then holds every object the dumps refer to
# (content is put in the bucket before its row is committed, and never removed). Run it as
# root. Rendered by `bloom deploy render` as /usr/local/sbin/bloom-backup.
set -eu

dest=${1:?usage: bloom-backup DEST}
env_file=${BLOOM_ENV_FILE:-{{ env_file }}}
worker_env_file=${BLOOM_WORKER_ENV_FILE:-{{ worker_env_file }}}
bloom=${BLOOM_BIN:-{{ bloom_bin }}}
python=${BLOOM_PYTHON:-{{ bloom_python }}}

# Where the settings put things, resolved by bloom itself (the env file's values, aliases, the
# defaults): RUNTIME_DB_KIND, RUNTIME_DB (without its password), RUNTIME_DB_PASSWORD, the same
# for MEMBRIDGE_DB, DATA_DIR, SECRET_KEY_FILE, ARTIFACT_STORE, ARTIFACT_DIR, S3_*.
settings=$(BLOOM_ENV_FILE=$env_file "$bloom" deploy settings)
eval "$settings"

umask 077
out="$dest/bloom-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out/env"

# PostgreSQL's password reaches pg_dump in a password file of its own (PGPASSFILE, mode 0600,
# removed on exit), in the child's environment only: never on a command line, which `ps` shows.
passfile=""
trap 'rm -f "$passfile"' EXIT
trap 'exit 1' HUP INT TERM
with_password() { # password, command…
	password=$1
	shift
	if [ -z "$password" ]; then
		"$@"
		return
	fi
	passfile=$(mktemp)
	printf '*:*:*:*:%s\n' "$(printf '%s' "$password" | sed 's/[\\:]/\\&/g')" >"$passfile"
	PGPASSFILE=$passfile "$@"
	rm -f "$passfile"
	passfile=""
}

# A database: PostgreSQL with pg_dump's custom format, SQLite with its online backup.
dump() { # kind, url or file, name, password
	case "$1" in
	postgresql)
		with_password "$4" pg_dump --format=custom --no-owner --no-privileges \
			--file="$out/$3.pgdump" "$2"
		;;
	sqlite)
		if [ -f "$2" ]; then
			"$python" -c 'import sqlite3, sys
source, copy = sqlite3.connect(sys.argv[1]), sqlite3.connect(sys.argv[2])
source.backup(copy)
copy.close()' "$2" "$out/$3.db"
		fi
		;;
	esac
}

# rclone for the bucket, its keys passed through its environment, never on a command line.
# (rclone 1.60 fails on AWS_CA_BUNDLE: a CA given that way is passed as --ca-cert instead.)
rclone_s3() {
	if [ -n "${AWS_CA_BUNDLE:-}" ]; then
		set -- --ca-cert "$AWS_CA_BUNDLE" "$@"
	fi
	env -u AWS_CA_BUNDLE RCLONE_S3_PROVIDER=Other RCLONE_S3_ENDPOINT="$S3_ENDPOINT" \
		RCLONE_S3_REGION="$S3_REGION" RCLONE_S3_ACCESS_KEY_ID="$S3_ACCESS_KEY" \
		RCLONE_S3_SECRET_ACCESS_KEY="$S3_SECRET_KEY" rclone "$@"
}

dump "$RUNTIME_DB_KIND" "$RUNTIME_DB" runtime "$RUNTIME_DB_PASSWORD"
dump "$MEMBRIDGE_DB_KIND" "$MEMBRIDGE_DB" membridge "$MEMBRIDGE_DB_PASSWORD"
if [ -n "$SECRET_KEY_FILE" ] && [ -f "$SECRET_KEY_FILE" ]; then
	cp -p "$SECRET_KEY_FILE" "$out/secret.key"
fi
for file in "$env_file" "$worker_env_file"; do
	if [ -f "$file" ]; then
		cp -p "$file" "$out/env/"
	fi
done
if [ "$ARTIFACT_STORE" = fs ] && [ -d "$ARTIFACT_DIR" ]; then
	tar -C "$ARTIFACT_DIR" -cf "$out/artifacts.tar" .
fi
if [ -n "$S3_ENDPOINT" ]; then
	rclone_s3 copy --metadata --quiet ":s3:$S3_BUCKET" "$out/bucket"
fi

{
	"$bloom" version
	BLOOM_ENV_FILE=$env_file "$bloom" db current
} >"$out/VERSION"
sums=$(cd "$out" && find . -type f -exec sha256sum {} +)
printf '%s\n' "$sums" >"$out/SHA256SUMS"
echo "$out"
