# Sourced by the README's commands: a Python virtualenv with the project and its dev tools
# in .venv, and the control-plane binaries (and helm) built into the cache (or reused from it).
#
# The dependencies come from the lock, requirements/dev.txt (exact versions, every file's
# hash checked; regenerate it with scripts/lock.sh), then the project itself, editable and
# without dependencies of its own. It stops when pyproject.toml asks for a package the lock
# lacks (`pip check`): run scripts/lock.sh after changing dependencies.
python_bin="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  printf '== creating .venv with %s\n' "$("$python_bin" --version)"
  "$python_bin" -m venv .venv
fi
printf '== installing Python dependencies (requirements/dev.txt, hashes checked)\n'
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet --require-hashes --no-deps -r requirements/dev.txt
.venv/bin/python -m pip install --quiet --no-deps -e .
# Only the project's own requirements count: other packages in a kept .venv are not ours.
missing=$(.venv/bin/python -m pip check 2>&1 | grep '^nodepool-operator ' || true)
if [ -n "$missing" ]; then
  printf '%s\nrequirements/dev.txt lacks what pyproject.toml asks for: run scripts/lock.sh\n' \
    "$missing" >&2
  return 1 2>/dev/null || exit 1
fi
printf '== control-plane binaries and helm (built once, then cached)\n'
.venv/bin/nodepool-operator cluster build
