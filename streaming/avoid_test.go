package streaming

import (
	"errors"
	"net"
	"testing"
)

// fakeListener is a listener on a given port that records its closing.
type fakeListener struct {
	port   int
	closed *[]int
}

func (l fakeListener) Accept() (net.Conn, error) { return nil, errors.New("fake") }
func (l fakeListener) Close() error              { *l.closed = append(*l.closed, l.port); return nil }
func (l fakeListener) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: l.port} }

// kernel hands out the given ports in turn, as listens on port 0.
func kernel(closed *[]int, ports ...int) func() (net.Listener, error) {
	return func() (net.Listener, error) {
		if len(ports) == 0 {
			return nil, errors.New("no more ports")
		}
		p := ports[0]
		ports = ports[1:]
		return fakeListener{port: p, closed: closed}, nil
	}
}

func TestAvoidingPortsAsksAgainAndHoldsTheAvoidedMeanwhile(t *testing.T) {
	var closed []int
	ln, err := avoidingPorts(kernel(&closed, 40001, 40002, 40003), []int{40002, 40001})()
	if err != nil {
		t.Fatal(err)
	}
	if got := ln.Addr().(*net.TCPAddr).Port; got != 40003 {
		t.Errorf("port %d, want 40003, the first not avoided", got)
	}
	if len(closed) != 2 || closed[0] != 40001 || closed[1] != 40002 {
		t.Errorf("closed %v, want the two avoided ports, held until a port fit", closed)
	}
}

func TestAvoidingPortsGivesUp(t *testing.T) {
	var closed []int
	if _, err := avoidingPorts(kernel(&closed, 40001, 40001, 40001), []int{40001})(); err == nil {
		t.Error("no error when every port given is avoided")
	}
	if len(closed) != 2 {
		t.Errorf("closed %v, want both held listeners closed", closed)
	}
}

func TestServerWithPortsToAvoidListensElsewhere(t *testing.T) {
	// A port in use (held here) to avoid: the kernel cannot give it, and the
	// server must neither fail nor listen there.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	avoid := probe.Addr().(*net.TCPAddr).Port
	s, err := New(Config{AvoidPorts: []int{avoid}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Addr().(*net.TCPAddr).Port; got == avoid {
		t.Errorf("listening on %d, which it was told to avoid", got)
	}
}
