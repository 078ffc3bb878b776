#!/usr/bin/env bash
# Makes what a job's mutual TLS needs, with the openssl command line: a job
# CA and one certificate per node. Installed as actorps-make-tls.
#
#   actorps-make-tls DIR NAME...
#
# writes, with owner-only keys:
#   DIR/ca.pem          the job's CA certificate: every node's --tls-ca
#   DIR/ca.key          the CA's key: signs more nodes later; keep it off the
#                       nodes
#   DIR/NAME.pem/.key   one node's --tls-cert and --tls-key (NAME is a label;
#                       CAF 0.17 checks the CA, not host names)
# Idempotent: an existing CA or node certificate is kept. ACTORPS_TLS_DAYS
# sets the validity (default 365 days).
set -euo pipefail
if [ $# -lt 2 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  echo "usage: $(basename "$0") DIR NAME... (a job CA and a certificate per NAME)" >&2
  exit 2
fi
command -v openssl >/dev/null \
  || { echo "$(basename "$0"): needs the openssl command (apt install openssl)" >&2; exit 2; }
dir="$1"
shift
days="${ACTORPS_TLS_DAYS:-365}"
umask 077
mkdir -p "$dir"
curve=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
if [ ! -f "$dir/ca.key" ] || [ ! -f "$dir/ca.pem" ]; then
  openssl req -x509 "${curve[@]}" -days "$days" -subj "/CN=actorps job CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
  chmod 644 "$dir/ca.pem"
fi
for name in "$@"; do
  case "$name" in
    ca | */* | "" ) echo "$(basename "$0"): bad node name '$name'" >&2; exit 2 ;;
  esac
  [ -f "$dir/$name.pem" ] && [ -f "$dir/$name.key" ] && continue
  ext="$(mktemp)"
  trap 'rm -f "$ext" "$dir/$name.csr"' EXIT
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyAgreement\nextendedKeyUsage=serverAuth,clientAuth\n' > "$ext"
  openssl req "${curve[@]}" -subj "/CN=$name" -keyout "$dir/$name.key" \
    -out "$dir/$name.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -days "$days" -extfile "$ext" -out "$dir/$name.pem" 2>/dev/null
  rm -f "$ext" "$dir/$name.csr"
  trap - EXIT
  chmod 644 "$dir/$name.pem"
done
echo "$(basename "$0"): CA and certificates in $dir"
