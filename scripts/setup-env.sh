# Sourced by the README's commands: a Python virtualenv with the project and its dev tools
# in .venv, and the control-plane binaries built into the cache (or reused from it).
python_bin="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  printf '== creating .venv with %s\n' "$("$python_bin" --version)"
  "$python_bin" -m venv .venv
fi
printf '== installing Python dependencies\n'
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[dev]'
printf '== control-plane binaries (built once, then cached)\n'
.venv/bin/nodepool-operator cluster build
