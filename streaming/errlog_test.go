package streaming

import (
	"io"
	"log"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

// TestHTTPServerLogIsOneDebugEntryPerMessage: the HTTP server's messages
// (a client cut off by a timeout, a bad TLS handshake) reach the daemon's
// log at debug level, each whole, without logrus's pipe and its 64 KB
// scanner buffer.
func TestHTTPServerLogIsOneDebugEntryPerMessage(t *testing.T) {
	logger, hook := test.NewNullLogger()
	logger.SetOutput(io.Discard)
	logger.SetLevel(logrus.DebugLevel)
	l := log.New(debugLog{logrus.NewEntry(logger)}, "", 0)
	l.Printf("http: TLS handshake error from %s: EOF", "127.0.0.1:5555")
	l.Print("http: superfluous response.WriteHeader call")
	entries := hook.AllEntries()
	if len(entries) != 2 {
		t.Fatalf("%d entries, want 2: %v", len(entries), entries)
	}
	if e := entries[0]; e.Level != logrus.DebugLevel || e.Message != "http: TLS handshake error from 127.0.0.1:5555: EOF" {
		t.Errorf("first entry %v %q, want debug and the message without its newline", e.Level, e.Message)
	}
}
