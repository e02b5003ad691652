// Package otlp has the OpenTelemetry collectors of minicri's tests.
package otlp

import (
	"net"
	"testing"
)

// Silent starts a collector that never answers: a TCP listener on
// 127.0.0.1 that accepts every connection and neither reads nor writes
// until the test ends. It returns its host:port.
func Silent(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return l.Addr().String()
}
