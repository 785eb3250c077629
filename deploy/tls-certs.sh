#!/bin/sh
# Makes the certificates batond's TLS needs, with openssl: a CA, a node
# certificate for the names clients connect by, and a client certificate
# (for --tls-client-ca). Every certificate is X.509 v3 with the extensions
# rustls checks: a CA without them, or a v1 leaf (plain `openssl x509 -req`
# without -extfile), is refused.
#
#   deploy/tls-certs.sh DIR NAME [NAME...]
#
# NAME: each host name or IP address clients use in --servers (an IP goes
# in the IP SANs, a host name in the DNS SANs). Writes into DIR:
#   ca.pem ca.key          the CA (keep ca.key offline)
#   node.pem node.key      batond --tls-cert node.pem --tls-key node.key
#   client.pem client.key  baton --tls-cert client.pem --tls-key client.key
# and clients trust the node with --tls-ca ca.pem (batond --tls-client-ca
# ca.pem to require client certificates). Keys are ECDSA P-256, readable
# by their owner only. A DIR that already holds ca.pem and ca.key keeps
# that CA: run it again there to make the next node's certificate (move
# node.pem and node.key away first). One node certificate may also carry
# every node's names.
set -eu

if [ $# -lt 2 ]; then
    echo "usage: $0 DIR NAME [NAME...]   (NAME: a host name or IP address of the node)" >&2
    exit 2
fi
dir=$1
shift
umask 077
mkdir -p "$dir"
cd "$dir"

sans=""
for name in "$@"; do
    case $name in
        *[!0-9.]* ) case $name in *:*) kind=IP ;; *) kind=DNS ;; esac ;;
        * ) kind=IP ;;
    esac
    sans="${sans:+$sans,}$kind:$name"
done

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }

if [ ! -f ca.pem ] || [ ! -f ca.key ]; then
    key ca.key
    printf '%s\n' \
        '[req]' 'distinguished_name = dn' 'x509_extensions = ca' 'prompt = no' \
        '[dn]' 'CN = baton CA' \
        '[ca]' 'basicConstraints = critical, CA:true' \
        'keyUsage = critical, keyCertSign, cRLSign' \
        'subjectKeyIdentifier = hash' > ca.cnf
    openssl req -new -x509 -config ca.cnf -key ca.key -days 3650 -sha256 -out ca.pem
    rm ca.cnf
fi

# leaf NAME CN EXTENSIONS: a v3 certificate signed by the CA.
leaf() {
    key "$1.key"
    openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
    printf '%s\n' 'basicConstraints = critical, CA:false' \
        'keyUsage = critical, digitalSignature' 'authorityKeyIdentifier = keyid' "$3" > "$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key \
        -set_serial "0x$(openssl rand -hex 16)" -days 825 -sha256 \
        -extfile "$1.ext" -out "$1.pem" 2>/dev/null
    rm "$1.csr" "$1.ext"
}

leaf node "$1" "extendedKeyUsage = serverAuth
subjectAltName = $sans"
leaf client "baton client" "extendedKeyUsage = clientAuth"
chmod 644 ca.pem node.pem client.pem 2>/dev/null || true
echo "made $(pwd)/{ca,node,client}.pem for $sans"
