package registry

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// ManifestServer is just enough of a registry on 127.0.0.1, in the test's
// own process, to be asked for the manifests of repository "m" and to answer
// them as a hostile or broken registry would: /v2/ answers 200, every
// manifest request goes to the test's handler, anything else is 404.
type ManifestServer struct {
	srv *httptest.Server
	// Sent counts the bytes the manifest answers got out to the client.
	Sent atomic.Int64
	// Requests counts the manifest requests.
	Requests atomic.Int64
}

// ServeManifests starts a ManifestServer whose manifest answers serve
// writes: headers on w, the body on out (which counts it). It stops when
// the test ends.
func ServeManifests(t testing.TB, serve func(w http.ResponseWriter, r *http.Request, out io.Writer)) *ManifestServer {
	t.Helper()
	m := &ManifestServer{}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v2/":
		case strings.HasPrefix(r.URL.Path, "/v2/m/manifests/"):
			m.Requests.Add(1)
			serve(w, r, &counter{w: w, n: &m.Sent})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(func() {
		m.srv.CloseClientConnections()
		m.srv.Close()
	})
	return m
}

// Host is "127.0.0.1:PORT".
func (m *ManifestServer) Host() string { return strings.TrimPrefix(m.srv.URL, "http://") }

// Ref is the reference of repository m at tag.
func (m *ManifestServer) Ref(tag string) string { return m.Host() + "/m:" + tag }

type counter struct {
	w io.Writer
	n *atomic.Int64
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// WriteHugeManifest writes the start of an OCI manifest and then size
// bytes of padding, in 64 KiB writes, until the client hangs up: the
// manifest of an attack on a client's memory.
func WriteHugeManifest(out io.Writer, size int64) {
	if _, err := io.WriteString(out, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","annotations":{"pad":"`); err != nil {
		return
	}
	chunk := []byte(strings.Repeat("a", 64<<10))
	for n := int64(0); n < size; n += int64(len(chunk)) {
		if _, err := out.Write(chunk); err != nil {
			return
		}
	}
}
