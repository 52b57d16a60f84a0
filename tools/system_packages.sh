#!/bin/sh
# The system (Debian) packages that `make run` and `make test` need: checked on every call (one dpkg-query, no
# network), installed with apt-get when some are missing and this user may (root, or sudo without a password),
# otherwise the one command to run is printed and the make stops.
#
#   sh tools/system_packages.sh run|test     check (and install); exit 0 when everything is there
#   sh tools/system_packages.sh --list SET   print the Debian packages of SET
#
# PYTHON (default python3) is the interpreter the Makefile builds .venv with. FACEBRIDGE_SYSTEM_CHECK=0 skips the
# check (packages installed another way, e.g. built from source). On a machine without dpkg/apt-get nothing is
# installed: what is missing is printed and make goes on (the tests that need it skip, saying why).
set -u

# run: nothing beyond Python with venv. The microphone (--audio mic) needs PortAudio, which is only named.
RUN_OPTIONAL="libportaudio2"
# test: the lip-sync tests synthesize speech with espeak-ng; the microphone test opens a real PortAudio (ALSA)
# device; the TLS test makes a certificate with openssl; the Unreal plugin core builds with CMake against gRPC C++
# and runs its GoogleTest suite; the monitor page test drives Debian's Chromium with Playwright; the slow-disk tests
# delay the recorder's fsyncs with strace.
TEST="espeak-ng libportaudio2 openssl cmake g++ pkg-config libgrpc++-dev libprotobuf-dev protobuf-compiler-grpc libgtest-dev chromium strace"

say() { printf 'facebridge: %s\n' "$*" >&2; }

set_packages() {
  case "$1" in
    run) echo "" ;;
    test) echo "$TEST" ;;
    *) say "unknown package set '$1' (run or test)"; exit 2 ;;
  esac
}

# Debian packages of $@ that are not installed (one dpkg-query for all of them)
not_installed() {
  [ $# -eq 0 ] && return 0
  installed=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "$@" 2>/dev/null | awk '$2 == "ii" {print $1}')
  for pkg in "$@"; do
    case " $(echo $installed) " in *" $pkg "*) ;; *) printf '%s ' "$pkg" ;; esac
  done
}

# What the interpreter needs to make .venv (only checked while there is none): Debian's python3 has venv and
# ensurepip in python3-venv.
python_needs() {
  [ -x "${VENV:-.venv}/bin/python" ] && return 0
  py=${PYTHON:-python3}
  if ! command -v "$py" >/dev/null 2>&1; then
    echo "python3 python3-venv"
  elif ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    echo "python3-venv"
  fi
}

apt_install() {  # $1: "" or "sudo -n"; the rest: packages
  as=$1; shift
  # a fresh machine has no package lists; an old list may name versions the mirror no longer has: update first
  # (only reached when something is missing). Wait up to 2 minutes for another apt to release its lock.
  $as env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=120 update >&2 &&
    $as env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o DPkg::Lock::Timeout=120 install --no-install-recommends \
      "$@" >&2
}

root_command() {  # the one command a user without password-less sudo runs
  cmd="apt-get update && apt-get install -y --no-install-recommends $*"
  if [ "$(id -u)" = 0 ]; then
    echo "$cmd"
  elif command -v sudo >/dev/null 2>&1 && LC_ALL=C sudo -n -l 2>&1 | grep -q "password is required"; then
    echo "sudo sh -c '$cmd'"
  else
    echo "su -c '$cmd'"
  fi
}

if [ "${1:-}" = "--list" ]; then
  set_packages "${2:-test}"
  exit 0
fi
set_name=${1:-test}
packages=$(set_packages "$set_name") || exit 2
[ "${FACEBRIDGE_SYSTEM_CHECK:-1}" = 0 ] && exit 0

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  # not Debian or Ubuntu: name what the Debian packages provide, once, only when something seems absent
  missing=""
  need_py=$(python_needs)
  [ -n "$need_py" ] && missing="$missing Python 3.10+ with venv and ensurepip;"
  if [ "$set_name" = test ]; then
    for tool in espeak-ng openssl cmake c++ pkg-config protoc grpc_cpp_plugin; do
      command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
    done
  fi
  if [ -n "$missing" ]; then
    say "this machine has no apt-get/dpkg, so nothing is installed here. Missing:$missing"
    say "install with your package manager what these Debian packages provide: $(echo $(python_needs) $packages)"
    say "(tests whose tools are missing are skipped and say why)"
  fi
  exit 0
fi

missing=$(echo $(python_needs) $(not_installed $packages))
if [ -z "$missing" ]; then
  if [ "$set_name" = run ] && [ -n "$(not_installed $RUN_OPTIONAL)" ]; then
    say "microphone input (--audio mic) needs PortAudio, not needed for this run: $(root_command $RUN_OPTIONAL)"
  fi
  exit 0
fi

say "\`make $set_name\` needs these Debian packages, not installed: $missing"
if [ "$(id -u)" = 0 ]; then
  as=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
  as="sudo -n"
else
  say "run this once (it needs root), then \`make $set_name\` again:"
  printf '\n    %s\n\n' "$(root_command $missing)" >&2
  exit 1
fi
say "installing them: ${as:+$as }apt-get install $missing"
if ! apt_install "$as" $missing; then
  say "apt-get failed (see above: no network, the package lock held by another apt for over 2 minutes, or a"
  say "package unknown to this release). When it can, run:  $(root_command $missing)"
  exit 1
fi
left=$(echo $(python_needs) $(not_installed $packages))
if [ -n "$left" ]; then
  say "still not installed after apt-get: $left"
  exit 1
fi
exit 0
