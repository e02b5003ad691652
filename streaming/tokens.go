package streaming

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"sync"
	"time"
)

// ErrTooManyRequests reports that maxInFlight URLs are waiting for their
// client; the caller should retry later.
var ErrTooManyRequests = errors.New("too many streaming requests waiting for their client")

// maxInFlight bounds the URLs handed out and not yet used or expired, so
// that a flood of Exec calls cannot grow the daemon.
const maxInFlight = 1000

// tokenCache maps single-use tokens to the requests they stand for. A token
// is 128 random bits: it is the only credential of its URL.
type tokenCache struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries map[string]tokenEntry
}

type tokenEntry struct {
	req     any
	expires time.Time
}

func newTokenCache(ttl time.Duration) *tokenCache {
	return &tokenCache{ttl: ttl, now: time.Now, entries: map[string]tokenEntry{}}
}

// insert stores req and returns its token.
func (c *tokenCache) insert(req any) (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	token := base64.RawURLEncoding.EncodeToString(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if len(c.entries) >= maxInFlight/2 {
		c.dropExpired(now)
	}
	if len(c.entries) >= maxInFlight {
		return "", ErrTooManyRequests
	}
	c.entries[token] = tokenEntry{req: req, expires: now.Add(c.ttl)}
	return token, nil
}

// consume takes the request out: a token works once, and not after it expired.
func (c *tokenCache) consume(token string) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[token]
	if !ok {
		return nil, false
	}
	delete(c.entries, token)
	if c.now().After(e.expires) {
		return nil, false
	}
	return e.req, true
}

func (c *tokenCache) dropExpired(now time.Time) {
	for token, e := range c.entries {
		if now.After(e.expires) {
			delete(c.entries, token)
		}
	}
}
