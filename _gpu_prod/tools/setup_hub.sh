#!/usr/bin/env bash
# Install what `make hub` runs, into $HUB_STATE (default /var/lib/labkit-hub), as root:
#   apt: bubblewrap, git, python3-venv, nodejs/npm (only those missing)
#   $HUB_STATE/hub-venv   jupyterhub + authenticators + idle culler (deploy/hub/requirements-hub.txt)
#   $HUB_STATE/proxy      configurable-http-proxy@5 (npm)
#   $HUB_STATE/user-venv  the students' environment: Debian's python3 (never a Python under /root,
#                         which a student's uid cannot read), jupyterlab, nbgitpuller, the course pins
# Idempotent: a second run only checks. HUB_SKIP_USER_VENV=1 skips the (3 GB) students' venv.
set -euo pipefail
cd "$(dirname "$0")/.."
STATE=${HUB_STATE:-/var/lib/labkit-hub}
PY=/usr/bin/python3
TORCH_INDEX=${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}

if [ "$(id -u)" != 0 ]; then
    echo "setup_hub.sh: run as root (sudo make hub): the hub installs into $STATE and uses apt" >&2
    exit 2
fi
need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v git >/dev/null || need+=(git)
command -v npm >/dev/null || need+=(nodejs npm)
[ -x $PY ] && $PY -c 'import ensurepip, venv' 2>/dev/null || need+=(python3 python3-venv)
if [ ${#need[@]} -gt 0 ]; then
    echo "installing ${need[*]} with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
mkdir -p "$STATE"
chmod 711 "$STATE"
umask 022   # the students' uids must be able to read the user venv

if [ ! -x "$STATE/hub-venv/bin/python" ]; then
    $PY -m venv "$STATE/hub-venv"
fi
# every time: a pin added since (pylti1p3) arrives; already satisfied pins cost no download
"$STATE/hub-venv/bin/pip" install -q -r deploy/hub/requirements-hub.txt
if [ ! -x "$STATE/proxy/node_modules/.bin/configurable-http-proxy" ]; then
    mkdir -p "$STATE/proxy"
    npm install --silent --prefix "$STATE/proxy" configurable-http-proxy@5
fi
if [ "${HUB_SKIP_USER_VENV:-0}" != 1 ] && [ ! -e "$STATE/user-venv/.labkit-hub" ]; then
    [ -x "$STATE/user-venv/bin/python" ] || $PY -m venv "$STATE/user-venv"
    "$STATE/user-venv/bin/pip" install -q --extra-index-url "$TORCH_INDEX" \
        -r deploy/hub/requirements-user.txt \
        $($PY tools/pinned_deps.py cpu,dev --except playwright,ruff,nbstripout)
    "$STATE/user-venv/bin/python" -m ipykernel install --sys-prefix --name labkit \
        --display-name "Python (labkit)" >/dev/null
    chmod -R a+rX "$STATE/user-venv"
    "$STATE/user-venv/bin/python" -c 'import torch, jupyterlab, nbgitpuller; print("students venv: torch", torch.__version__)'
    touch "$STATE/user-venv/.labkit-hub"
fi
echo "hub installed in $STATE"
