# Sourced by every script that uses Debian packages, which names them where it uses them:
# install_missing PACKAGE... installs those not installed yet (as root, or through sudo;
# `apt-get update` once). $apt_options, when set, goes to apt-get install.
# For scripts/check_packages, which compares the packages named with the files used:
# - $DROIDHEAP_PACKAGES_LOG, when set, is a file the names are added to, one a line;
# - DROIDHEAP_PACKAGES_INSTALL=no installs nothing: a package not installed is an error (the
#   checks run where everything is installed; scripts/test runs the tests so).
# An installer keeps what it named in a file of its own (log_packages_to), for the test suite's
# check in CI (scripts/test).
apt_updated=
apt_options=
install_missing() {
  local missing=() p
  [ -z "${DROIDHEAP_PACKAGES_LOG:-}" ] || printf '%s\n' "$@" >> "$DROIDHEAP_PACKAGES_LOG"
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  if [ "${DROIDHEAP_PACKAGES_INSTALL:-}" = no ]; then
    echo "install_missing: Debian packages not installed: ${missing[*]} (scripts/install and" \
         "scripts/install_test_tools install what droidheap and its tests use)" >&2
    return 1
  fi
  local sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  [ -n "$apt_updated" ] || "${sudo_cmd[@]}" apt-get update -qq
  apt_updated=1
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq $apt_options \
    "${missing[@]}"
}

# log_packages_to FILE: what install_missing is asked for from now on is kept in FILE (emptied
# first); at the script's exit it goes to the log of a check that runs the script too.
log_packages_to() {
  packages_outer_log=${DROIDHEAP_PACKAGES_LOG:-}
  export DROIDHEAP_PACKAGES_LOG=$1
  : > "$DROIDHEAP_PACKAGES_LOG"
  [ -z "$packages_outer_log" ] || trap 'cat "$DROIDHEAP_PACKAGES_LOG" >> "$packages_outer_log"' EXIT
}
