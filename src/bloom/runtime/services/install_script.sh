#!/bin/sh
# Installs a BLOOM Runtime worker on this node as a service (systemd or OpenRC), as
# docs/deployment.md does by hand, then checks that it comes online at the runtime.
# Served by GET /api/runtime/agent-install-script; run it as root:
#   curl -fsSL -H "X-Runtime-API-Key: <admin key>" "<runtime>/api/runtime/agent-install-script?node_id=<name>" | sudo sh
# Keys not embedded here are read from this shell's environment (BLOOM_WORKER_API_KEY,
# MEMBRIDGE_AGENT_KEY) and written only to the env file (mode 0600).
set -eu

RUNTIME_URL={{ runtime_url }}
REPO_URL={{ repo_url }}
NODE_ID={{ node_id }}
AGENT_PORT={{ port }}
# shellcheck disable=SC2016  # a key is data: single-quoted, whatever it holds
WORKER_KEY={{ worker_key }}
# shellcheck disable=SC2016
AGENT_KEY={{ agent_key }}

PREFIX=/opt/bloom
ENV_FILE=/etc/bloom-worker.env
WORKER_USER=bloom-worker
DATA_DIR=/var/lib/bloom-worker
WAIT_SEC={{ wait_sec }}
KEY_PLACEHOLDER="<a worker key: bloom key create --role worker --worker $NODE_ID>"

say() { printf 'bloom-install: %s\n' "$*"; }
die() { printf 'bloom-install: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run me as root (... | sudo sh)"
printf '%s\n' "$NODE_ID" | grep -Eqx '{{ name_pattern }}' ||
    die "'$NODE_ID' is not a worker name: letters, digits and . _ : @ - (give ?node_id=)"
for tool in git python3 curl; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is required: install it first"
done
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    INIT=systemd
elif command -v openrc-run >/dev/null 2>&1 || [ -x /sbin/openrc-run ]; then
    INIT=openrc
else
    die "neither systemd nor OpenRC runs here"
fi
curl -fsS -o /dev/null "$RUNTIME_URL/api/runtime/health" ||
    die "the runtime does not answer at $RUNTIME_URL/api/runtime/health"
say "installing worker $NODE_ID ($INIT) for $RUNTIME_URL"

# The code, as docs/deployment.md step 2 installs it.
if [ -d "$PREFIX/.git" ]; then
    git -C "$PREFIX" pull --ff-only -q
else
    git clone -q "$REPO_URL" "$PREFIX"
fi
UV="$PREFIX/.cache/uv-bootstrap/bin/uv"
if [ ! -x "$UV" ]; then
    python3 -m venv "$PREFIX/.cache/uv-bootstrap"
    "$PREFIX/.cache/uv-bootstrap/bin/pip" install -q uv
fi
(cd "$PREFIX" && "$UV" sync -q --frozen --no-dev)
BLOOM="$PREFIX/.venv/bin/bloom"

# The worker's own user and data dir.
if ! id "$WORKER_USER" >/dev/null 2>&1; then
    if command -v useradd >/dev/null 2>&1; then
        useradd --system --user-group --home-dir "$DATA_DIR" --shell /usr/sbin/nologin "$WORKER_USER"
    else
        addgroup -S "$WORKER_USER"
        adduser -S -D -H -h "$DATA_DIR" -s /sbin/nologin -G "$WORKER_USER" "$WORKER_USER"
    fi
fi
install -d -o "$WORKER_USER" -g "$WORKER_USER" -m 0700 "$DATA_DIR"

# The env file: mode 0600, root's. systemd or the OpenRC script reads it as root and hands the
# worker its settings: the worker's user, which Claude runs as, cannot read it. A previous one is
# kept as .old.
ADDRESS=$(hostname -I 2>/dev/null | cut -d ' ' -f 1)
[ -n "$ADDRESS" ] || ADDRESS=$(hostname)
if [ -n "$AGENT_KEY" ]; then
    AGENT_LINES="BLOOM_WORKER_AGENT_PORT=$AGENT_PORT
BLOOM_WORKER_AGENT_HOST=0.0.0.0
BLOOM_WORKER_AGENT_URL=http://$ADDRESS:$AGENT_PORT
MEMBRIDGE_AGENT_KEY=$AGENT_KEY"
else
    AGENT_LINES="# No agent key given (MEMBRIDGE_AGENT_KEY): claims tasks only, serves no agent surface.
# BLOOM_WORKER_AGENT_PORT=$AGENT_PORT"
fi
umask 077
[ ! -e "$ENV_FILE" ] || { mv "$ENV_FILE" "$ENV_FILE.old" && chown 0:0 "$ENV_FILE.old"; }
cat >"$ENV_FILE.new" <<EOF
# Written by the runtime's install script. Every setting: $PREFIX/deploy/bloom-worker.env.example
BLOOM_RUNTIME_URL=$RUNTIME_URL
BLOOM_WORKER_NAME=$NODE_ID
BLOOM_WORKER_API_KEY=${WORKER_KEY:-$KEY_PLACEHOLDER}
BLOOM_DATA_DIR=$DATA_DIR
$AGENT_LINES
# Membridge, if the worker should announce itself there too:
# BLOOM_MEMBRIDGE_URL=$RUNTIME_URL/membridge
# MEMBRIDGE_ADMIN_KEY=
# The Claude CLI (an absolute path) and its key:
# BLOOM_CLAUDE_BIN=/usr/local/bin/claude
# ANTHROPIC_API_KEY=
BLOOM_LOG_FORMAT=json
EOF
chmod 600 "$ENV_FILE.new"
chown 0:0 "$ENV_FILE.new"
mv "$ENV_FILE.new" "$ENV_FILE"

# The service, rendered by `bloom deploy render` for this host.
RENDERED=$(mktemp -d)
trap 'rm -rf "$RENDERED"' EXIT
said=$("$BLOOM" deploy render --domain localhost --user bloom --worker-user "$WORKER_USER" \
    "--$INIT" --out "$RENDERED" 2>&1) || die "bloom deploy render failed: $said"
if [ "$INIT" = systemd ]; then
    install -m 0644 "$RENDERED/etc/systemd/system/bloom-worker.service" /etc/systemd/system/
    systemctl daemon-reload
    systemctl enable -q bloom-worker
else
    install -m 0755 "$RENDERED/etc/init.d/bloom-worker" /etc/init.d/
    rc-update add bloom-worker default >/dev/null
fi

if [ -z "$WORKER_KEY" ]; then
    say "installed, NOT started: $ENV_FILE has no worker key yet. Make one on the runtime's host:"
    say "  bloom key create --role worker --worker $NODE_ID"
    say "put it in $ENV_FILE (BLOOM_WORKER_API_KEY=), then start the service bloom-worker."
    exit 0
fi
if [ "$INIT" = systemd ]; then
    systemctl restart bloom-worker
else
    rc-service bloom-worker restart
fi

# Online at the runtime within WAIT_SEC, or a clear failure.
say "waiting up to ${WAIT_SEC}s for $NODE_ID to come online"
waited=0
while :; do
    if printf 'header = "X-Runtime-API-Key: %s"\n' "$WORKER_KEY" |
        curl -fsS -K - "$RUNTIME_URL/api/runtime/workers/$NODE_ID" 2>/dev/null |
        grep -q '"status":"online"'; then
        say "worker $NODE_ID is online at $RUNTIME_URL"
        exit 0
    fi
    [ "$waited" -lt "$WAIT_SEC" ] || break
    sleep 2
    waited=$((waited + 2))
done
die "worker $NODE_ID did not come online within ${WAIT_SEC}s: see /var/log/bloom-worker-error.log"
