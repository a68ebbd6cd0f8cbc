#!/usr/bin/env bash
# System tools the course needs beyond pip: graphviz's `dot` (diagrams), chromium (browser tests) and
# bubblewrap's `bwrap` (the sandbox `make grade` runs student code in; Linux only).
# Installs them with apt when running as root on Debian/Ubuntu; otherwise says what to install.
set -euo pipefail

need=()
command -v dot >/dev/null 2>&1 || need+=(graphviz)
[ -x /usr/bin/chromium ] || need+=(chromium)
[ "$(uname -s)" = Linux ] && ! command -v bwrap >/dev/null 2>&1 && need+=(bubblewrap)
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${need[*]} with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    exit 0
fi

for pkg in "${need[@]}"; do
    case $pkg in
    graphviz)
        echo "ERROR: the 'dot' binary (graphviz) is missing; diagrams need it." >&2
        echo "  Debian/Ubuntu: sudo apt-get install graphviz   macOS: brew install graphviz" >&2
        echo "  conda: conda install -c conda-forge graphviz" >&2
        exit 1 ;;
    chromium)
        echo "note: /usr/bin/chromium is missing; the browser tests will be skipped." >&2
        echo "  Debian/Ubuntu: sudo apt-get install chromium" >&2 ;;
    bubblewrap)
        echo "note: bwrap (bubblewrap) is missing; \`make grade\` refuses to grade without it." >&2
        echo "  Debian/Ubuntu: sudo apt-get install bubblewrap   Fedora: sudo dnf install bubblewrap" >&2
        echo "  (students do not need it: \`make check\` runs without a sandbox)" >&2 ;;
    esac
done
