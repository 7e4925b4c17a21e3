#!/bin/sh
# A self-signed certificate for a host without a public name (no Let's Encrypt): the pair the
# nginx site reads, DIR/fullchain.pem and DIR/privkey.pem (EC P-256, mode 0600 for the key).
# Rendered by `bloom deploy render` as /usr/local/sbin/bloom-self-signed-cert.
#
#   bloom-self-signed-cert [NAME] [DIR] [DAYS]     defaults: {{ domain }}, {{ cert_dir }}, 825
#
# NAME is a DNS name or an IP address. Clients must trust the certificate: browsers ask once;
# a remote worker sets SSL_CERT_FILE to a copy of DIR/fullchain.pem; curl takes --cacert.
set -eu

name=${1:-{{ domain }}}
dir=${2:-{{ cert_dir }}}
days=${3:-825}

case "$name" in
*[!0-9.]*) san="DNS:$name" ;;
*) san="IP:$name" ;;
esac
case "$name" in
*:*) san="IP:$name" ;;
esac

umask 077
mkdir -p "$dir"
openssl req -x509 -nodes -sha256 -days "$days" \
	-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
	-subj "/CN=$name" -addext "subjectAltName=$san" \
	-keyout "$dir/privkey.pem.new" -out "$dir/fullchain.pem.new" 2>/dev/null
chmod 600 "$dir/privkey.pem.new"
chmod 644 "$dir/fullchain.pem.new"
mv -f "$dir/privkey.pem.new" "$dir/privkey.pem"
mv -f "$dir/fullchain.pem.new" "$dir/fullchain.pem"
echo "self-signed certificate for $name ($san), $days days: $dir/fullchain.pem, $dir/privkey.pem"
