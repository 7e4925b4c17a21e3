#!/bin/sh
# certbot's deploy hook for the BLOOM Runtime site: after the first certificate and after every
# renewal, link Let's Encrypt's files where the nginx site reads its certificate, and reload
# nginx (no downtime). Rendered by `bloom deploy render` as /usr/local/sbin/bloom-certbot-hook:
#
#   certbot certonly --webroot -w {{ acme_root }} -d {{ domain }} \
#       --deploy-hook /usr/local/sbin/bloom-certbot-hook
#
# certbot remembers the hook for renewals (`certbot renew`, from its timer or cron).
set -eu

lineage=${RENEWED_LINEAGE:-/etc/letsencrypt/live/{{ domain }}}
dir={{ cert_dir }}

for file in fullchain.pem privkey.pem; do
	if [ ! -e "$lineage/$file" ]; then
		echo "bloom-certbot-hook: $lineage/$file is missing" >&2
		exit 1
	fi
done
mkdir -p "$dir"
ln -sfn "$lineage/fullchain.pem" "$dir/fullchain.pem"
ln -sfn "$lineage/privkey.pem" "$dir/privkey.pem"
nginx -t -q
nginx -s reload
echo "bloom-certbot-hook: $dir now holds $lineage's certificate; nginx reloaded"
