// Package connlimittest sends raw HTTP requests for the tests of the
// bounded listeners: requests a client library would not send (a body
// announced and never sent, a method on the wrong path), read back as the
// server answers them.
package connlimittest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// Answer is what the server did with one raw request.
type Answer struct {
	Code int
	Body string
	// Closed tells whether the server closed the connection after the
	// answer (within the wait), as it must after a refusal.
	Closed bool
}

// Exchange writes request on a new connection to addr and reads the answer,
// waiting at most wait for it and then for the connection's end.
func Exchange(addr, request string, wait time.Duration) (Answer, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return Answer{}, err
	}
	defer c.Close()
	if _, err := io.WriteString(c, request); err != nil {
		return Answer{}, fmt.Errorf("send: %w", err)
	}
	if err := c.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return Answer{}, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return Answer{}, fmt.Errorf("no answer within %s: %w", wait, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// Anything but a deadline is the connection's end: EOF, or a reset
	// when the server closed it with the announced body unread.
	_, err = br.ReadByte()
	closed := err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
	return Answer{Code: resp.StatusCode, Body: string(body), Closed: closed}, nil
}
