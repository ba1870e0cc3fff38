# Sourced by scripts/install and scripts/install_test_tools: install_missing PACKAGE... installs
# the Debian packages not installed yet (as root, or through sudo; `apt-get update` once).
# $apt_options, when set, goes to apt-get install.
apt_updated=
apt_options=
install_missing() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  local sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  [ -n "$apt_updated" ] || "${sudo_cmd[@]}" apt-get update -qq
  apt_updated=1
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq $apt_options \
    "${missing[@]}"
}
