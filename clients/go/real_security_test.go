// The client against real batond processes run with TLS and users.

package baton

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// pki is a throwaway CA and the certificates it signed, as files.
type pki struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPool *x509.CertPool
	serial int64
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "baton test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &pki{dir: t.TempDir(), ca: ca, caKey: key, caPool: x509.NewCertPool(), serial: 1}
	p.caPool.AddCert(ca)
	writePEM(t, filepath.Join(p.dir, "ca.pem"), "CERTIFICATE", der)
	return p
}

// issue signs a leaf for 127.0.0.1 and writes name.pem and name.key.
func (p *pki) issue(t *testing.T, name string, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	p.serial++
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(key)
	writePEM(t, filepath.Join(p.dir, name+".pem"), "CERTIFICATE", der)
	writePEM(t, filepath.Join(p.dir, name+".key"), "PRIVATE KEY", pkcs8)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (p *pki) file(name string) string { return filepath.Join(p.dir, name) }

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestRealTLS(t *testing.T) {
	p := newPKI(t)
	p.issue(t, "node", x509.ExtKeyUsageServerAuth)
	n := startNode(t, "", "--tls-cert", p.file("node.pem"), "--tls-key", p.file("node.key"))
	ctx := bg(t, 30*time.Second)
	c := dialTest(t, []string{n.addr}, WithTLS(&tls.Config{RootCAs: p.caPool}))
	l, err := c.Acquire(ctx, "k", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(ctx, []string{n.addr}); !errors.Is(err, ErrTLS) {
		t.Fatalf("plaintext to a TLS node: %v", err)
	}
	other := newPKI(t)
	if _, err := Dial(ctx, []string{n.addr}, WithTLS(&tls.Config{RootCAs: other.caPool})); !errors.Is(err, ErrTLS) {
		t.Fatalf("a certificate from an unknown CA: %v", err)
	}
	plain := startNode(t, "")
	if _, err := Dial(ctx, []string{plain.addr}, WithTLS(&tls.Config{RootCAs: p.caPool})); !errors.Is(err, ErrTLS) {
		t.Fatalf("TLS to a plaintext node: %v", err)
	}
}

func TestRealTLSClientCertificates(t *testing.T) {
	p := newPKI(t)
	p.issue(t, "node", x509.ExtKeyUsageServerAuth)
	clientCert := p.issue(t, "client", x509.ExtKeyUsageClientAuth)
	n := startNode(t, "", "--tls-cert", p.file("node.pem"), "--tls-key", p.file("node.key"),
		"--tls-client-ca", p.file("ca.pem"))
	ctx := bg(t, 30*time.Second)
	c := dialTest(t, []string{n.addr}, WithTLS(&tls.Config{RootCAs: p.caPool, Certificates: []tls.Certificate{clientCert}}))
	if _, err := c.Acquire(ctx, "k", AcquireOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(ctx, []string{n.addr}, WithTLS(&tls.Config{RootCAs: p.caPool})); !errors.Is(err, ErrTLS) {
		t.Fatalf("no client certificate: %v", err)
	}
}

const usersFile = `
[[user]]
name = "billing"
secret = "s3cr3t-value"
prefixes = ["billing/"]
`

func TestRealUsers(t *testing.T) {
	file := filepath.Join(t.TempDir(), "users.toml")
	if err := os.WriteFile(file, []byte(usersFile), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, "", "--auth-file", file)
	ctx := bg(t, 60*time.Second)
	if _, err := Dial(ctx, []string{n.addr}, WithCredentials("billing", "wrong")); !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong secret: %v", err)
	}
	c := dialTest(t, []string{n.addr}, WithCredentials("billing", "s3cr3t-value"))
	l, err := c.Acquire(ctx, "billing/invoice-7", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "payroll/run", AcquireOptions{}); !errors.Is(err, ErrPermission) {
		t.Fatalf("a key outside the prefixes: %v", err)
	}
	// Without credentials the node answers S with "authentication
	// required": no connection is usable, so Dial fails.
	var refusal *Error
	_, err = Dial(ctx, []string{n.addr})
	if !errors.Is(err, ErrAuth) || !errors.As(err, &refusal) || refusal.Reason != "authentication required" {
		t.Fatalf("no credentials: %v", err)
	}
	// A restarted node: the reconnections authenticate again.
	n.restart()
	l2, err := c.Acquire(ctx, "billing/invoice-8", AcquireOptions{Wait: 10 * time.Second})
	if err != nil {
		t.Fatalf("after a restart: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d after %d", l2.Token(), l.Token())
	}
	// Credentials to a node without users.
	plain := startNode(t, "")
	if _, err := Dial(ctx, []string{plain.addr}, WithCredentials("billing", "s3cr3t-value")); !errors.Is(err, ErrAuth) {
		t.Fatalf("credentials to a node without users: %v", err)
	}
}
