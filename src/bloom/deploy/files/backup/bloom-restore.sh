#!/bin/sh
# bloom-restore: put a bloom-backup back (docs/backup.md has the whole drill).
#
#   bloom-restore BACKUP_DIR
#
# Before: the services stopped (bloom-worker, bloom-runtime, bloom-membridge); on PostgreSQL the
# databases the env file names exist and are empty (createdb). Then, in this order:
#   1. the env files, where none is yet (an existing one is kept: compare it with BACKUP_DIR/env/)
#   2. the databases (pg_restore, or the SQLite files copied into place)
#   3. the secret key, into the data dir
#   4. the artifact files (fs) and the bucket (rclone, object metadata kept)
# After: start the services; the runtime migrates a dump from an older version at start (or run
# `bloom db upgrade` first). Run it as root. Rendered by `bloom deploy render` as
# /usr/local/sbin/bloom-restore.
set -eu

backup=${1:?usage: bloom-restore BACKUP_DIR}
env_file=${BLOOM_ENV_FILE:-{{ env_file }}}
worker_env_file=${BLOOM_WORKER_ENV_FILE:-{{ worker_env_file }}}
bloom=${BLOOM_BIN:-{{ bloom_bin }}}
owner=${BLOOM_USER:-{{ user }}}

if [ ! -f "$backup/SHA256SUMS" ]; then
	echo "bloom-restore: $backup is not a bloom-backup (no SHA256SUMS)" >&2
	exit 1
fi
(cd "$backup" && sha256sum -c --quiet SHA256SUMS)

umask 077
# 1. The env files: a missing one comes back; an existing one is this host's and stays.
for file in "$env_file" "$worker_env_file"; do
	saved="$backup/env/$(basename "$file")"
	if [ -f "$saved" ] && [ ! -e "$file" ]; then
		cp -p "$saved" "$file"
		echo "restored $file"
	elif [ -f "$saved" ]; then
		echo "kept $file (this host's; the saved one is $saved)"
	fi
done

settings=$(BLOOM_ENV_FILE=$env_file "$bloom" deploy settings)
eval "$settings"

# PostgreSQL's password reaches pg_restore in a password file of its own (PGPASSFILE, mode 0600,
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

# 2. The databases.
load() { # kind, url or file, name, password
	case "$1" in
	postgresql)
		if [ -f "$backup/$3.pgdump" ]; then
			with_password "$4" pg_restore --no-owner --no-privileges --exit-on-error \
				--single-transaction --dbname="$2" "$backup/$3.pgdump"
			echo "restored the $3 database"
		fi
		;;
	sqlite)
		if [ -f "$backup/$3.db" ]; then
			mkdir -p "$(dirname "$2")"
			rm -f "$2-wal" "$2-shm"
			cp "$backup/$3.db" "$2"
			chown "$owner:" "$2" 2>/dev/null || true
			echo "restored the $3 database ($2)"
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

load "$RUNTIME_DB_KIND" "$RUNTIME_DB" runtime "$RUNTIME_DB_PASSWORD"
load "$MEMBRIDGE_DB_KIND" "$MEMBRIDGE_DB" membridge "$MEMBRIDGE_DB_PASSWORD"

# 3. The secret key (unless the env file sets BLOOM_SECRET_KEY).
if [ -n "$SECRET_KEY_FILE" ] && [ -f "$backup/secret.key" ]; then
	mkdir -p "$(dirname "$SECRET_KEY_FILE")"
	cp -p "$backup/secret.key" "$SECRET_KEY_FILE"
	chmod 600 "$SECRET_KEY_FILE"
	chown "$owner:" "$SECRET_KEY_FILE" 2>/dev/null || true
	echo "restored $SECRET_KEY_FILE"
fi

# 4. Artifact content.
if [ -f "$backup/artifacts.tar" ]; then
	mkdir -p "$ARTIFACT_DIR"
	tar -C "$ARTIFACT_DIR" -xf "$backup/artifacts.tar"
	chown -R "$owner:" "$ARTIFACT_DIR" 2>/dev/null || true
	echo "restored $ARTIFACT_DIR"
fi
if [ -d "$backup/bucket" ] && [ -n "$S3_ENDPOINT" ]; then
	rclone_s3 copy --metadata --quiet "$backup/bucket" ":s3:$S3_BUCKET"
	echo "restored the bucket $S3_BUCKET"
fi
echo "done: start bloom-membridge, bloom-runtime, bloom-worker"
