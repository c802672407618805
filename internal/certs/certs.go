// Package certs gives a daemon's TCP listener its TLS: a certificate and key the
// operator names, or a self-signed pair generated into the data directory, whose
// SHA-256 fingerprint a client pins or whose PEM file a client trusts as its CA. It also
// says which listen addresses are loopback: a bearer token crosses no network in clear
// text, so any other address needs TLS.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Files of a generated pair in the data directory.
const (
	CertFile = "tls-cert.pem" // the self-signed certificate, 0644: a client's ca_file
	KeyFile  = "tls-key.pem"  // its private key, 0600
)

// Validity is how long a generated certificate is valid.
const Validity = 5 * 365 * 24 * time.Hour

// Loopback says whether addr, host:port, listens on loopback only: a loopback IP or
// "localhost". An empty host listens everywhere.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// SelfSigned returns the files of dir's generated pair, made (or made again) so that
// the certificate names every one of hosts, loopback's names, and the machine's name.
func SelfSigned(dir string, hosts ...string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	name, _ := os.Hostname()
	want := []string{"localhost", "127.0.0.1", "::1"}
	for _, h := range append(hosts, name) {
		if h != "" && !slices.Contains(want, h) {
			want = append(want, h)
		}
	}
	if covers(certFile, keyFile, want) {
		return certFile, keyFile, nil
	}
	if err := generate(certFile, keyFile, want); err != nil {
		return "", "", fmt.Errorf("certs: self-signed pair: %w", err)
	}
	return certFile, keyFile, nil
}

// covers says whether the pair loads, is valid for a day more, and names every host.
func covers(certFile, keyFile string, hosts []string) bool {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return false
	}
	cert := pair.Leaf
	if cert == nil || time.Now().Add(24*time.Hour).After(cert.NotAfter) {
		return false
	}
	for _, h := range hosts {
		if cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// generate writes a new self-signed pair naming hosts: the key first, each file
// written aside and renamed into place.
func generate(certFile, keyFile string, hosts []string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "kiln daemon " + hosts[len(hosts)-1]},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(Validity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true, // its own CA: the file is what a client trusts
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// writeFile writes data to path whole, through a file aside renamed into place.
func writeFile(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// ServerConfig is the TLS configuration of a listener serving the pair.
func ServerConfig(certFile, keyFile string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// Fingerprint is the SHA-256 of certFile's first certificate, as colon-separated hex.
func Fingerprint(certFile string) (string, error) {
	data, err := os.ReadFile(certFile)
	if err != nil {
		return "", fmt.Errorf("certs: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return "", errors.New("certs: " + certFile + " holds no PEM certificate")
	}
	sum := sha256.Sum256(block.Bytes)
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = strings.ToUpper(hex.EncodeToString([]byte{b}))
	}
	return strings.Join(parts, ":"), nil
}
