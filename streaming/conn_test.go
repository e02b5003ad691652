package streaming

import (
	"io"
	"net"
	"testing"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/connlimit"
)

// dataSegmentsOut is how many segments with data a TCP connection sent.
func dataSegmentsOut(t *testing.T, c *net.TCPConn) uint32 {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	var ierr error
	if err := rc.Control(func(fd uintptr) { info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil || ierr != nil {
		t.Fatal(err, ierr)
	}
	return info.Data_segs_out
}

// TestFrameHeaderAndDataLeaveInOneSegment: a SPDY frame is written as its
// header fields one by one, then its data; on a connection accepted through
// the connection limiter they still leave in one TCP segment (one writev),
// so that the client (or the kubelet) wakes once per frame, not twice.
func TestFrameHeaderAndDataLeaveInOneSegment(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := connlimit.New(ln, connlimit.Limits{Max: 4, MaxWaiting: 4}, logrus.NewEntry(logrus.New()))
	defer lim.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// A request's first byte: the listener holds a silent connection back.
	if _, err := client.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, client)
	conn, err := lim.Accept()
	if err != nil {
		t.Fatal(err)
	}
	wc := newWatchedConn(conn, func() {})
	defer wc.Close()
	tcp := conn.(*connlimit.Conn).Conn.(*net.TCPConn)

	const frames = 20
	data := make([]byte, 4095) // what a pty read gives
	before := dataSegmentsOut(t, tcp)
	for range frames {
		for _, part := range [][]byte{{0, 0, 0, 3}, {0, 0, 0x0f, 0xff}, data} {
			if _, err := wc.Write(part); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Now and then the kernel splits one; two writes a frame give twice
	// as many.
	if sent := dataSegmentsOut(t, tcp) - before; sent > frames*5/4 {
		t.Errorf("%d frames left in %d segments, want one each", frames, sent)
	}
}
