# Sourced by the H200 scripts (tools/measure/h200_swap_bench.sh, tools/measure/gpu_serve_bench.sh): the device image has no network,
# so the wheels it lacks are carried in the working tree and installed into a target folder put first on PYTHONPATH.
# install_wheels DIR [SITE]: every wheel in DIR, no index, no dependencies (the carried set is complete), into SITE
# (default /tmp/site); returns 4, saying so, when DIR holds none or pip fails.
install_wheels() {
  _dir=$1 _site=${2:-/tmp/site}
  ls "$_dir"/*.whl >/dev/null 2>&1 || { echo "no wheels in $_dir: pack them here (tools/measure/pack_gpu_serve.sh) and carry $_dir"; return 4; }
  mkdir -p "$_site"
  "${PY:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$_site" \
    "$_dir"/*.whl || { echo "pip could not install the wheels in $_dir into $_site"; return 4; }
  PYTHONPATH=$_site${PYTHONPATH:+:$PYTHONPATH}
  export PYTHONPATH
}
