package certs

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8765": true, "[::1]:1": true, "localhost:1": true, "127.1.2.3:0": true,
		":8765": false, "0.0.0.0:1": false, "10.0.0.2:1": false, "[::]:1": false, "example.com:1": false, "nonsense": false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v; want %v", addr, got, want)
		}
	}
}

func TestSelfSignedIsItsOwnCAAndKeptWhileItCovers(t *testing.T) {
	dir := t.TempDir()
	cert, key, err := SelfSigned(dir, "10.9.8.7")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	fp, err := Fingerprint(cert)
	if err != nil || len(fp) != 32*3-1 || strings.ToUpper(fp) != fp {
		t.Fatalf("fingerprint %q, %v", fp, err)
	}
	conf, err := ServerConfig(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	srv.TLS = conf
	srv.StartTLS()
	defer srv.Close()
	pem, _ := os.ReadFile(cert)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatalf("a client trusting the certificate file: %v", err)
	}
	resp.Body.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	if resp, err := client.Get("https://localhost:" + port); err != nil {
		t.Errorf("by the name localhost: %v", err)
	} else {
		resp.Body.Close()
	}
	again, _, err := SelfSigned(dir, "10.9.8.7")
	if fp2, _ := Fingerprint(again); err != nil || fp2 != fp {
		t.Errorf("a pair that covers its hosts is kept: %v, %s != %s", err, fp2, fp)
	}
	if _, _, err := SelfSigned(dir, "10.1.1.1"); err != nil {
		t.Fatal(err)
	}
	if fp3, _ := Fingerprint(cert); fp3 == fp {
		t.Errorf("a pair that does not name a new host is made again")
	}
}

func TestFingerprintRefusesWhatIsNoCertificate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.pem")
	os.WriteFile(path, []byte("not pem"), 0o600)
	if _, err := Fingerprint(path); err == nil {
		t.Error("no error")
	}
}
