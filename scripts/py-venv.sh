# Sourced by the lint scripts: the venv of every Python tool, target/py-venv (as
# testbed/src/python.rs makes it for cargo xtask), never a system Python (PEP 668).
# py_install SPEC [NOTE]: pip install SPEC (pinned) into it, made first if missing, with
# python3-venv from apt-get (as root) when python3 cannot make one.
venv="${CARGO_TARGET_DIR:-target}/py-venv"

py_install() {
    if [ ! -x "$venv/bin/python" ] && ! python3 -m venv "$venv" >/dev/null 2>&1; then
        if [ "$(id -u)" -ne 0 ]; then
            echo "error: python3 -m venv $venv failed; install python3-venv (apt-get install python3-venv)" \
                "or rerun as root" >&2
            exit 1
        fi
        echo "==> apt-get install python3-venv" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update
        apt-get install -y --no-install-recommends python3-venv
        rm -rf "$venv"
        python3 -m venv "$venv"
    fi
    echo "==> pip install $1 into $venv${2:+ ($2)}" >&2
    # python -m pip, not bin/pip: a copied venv's scripts run the original's python.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$1"
}
