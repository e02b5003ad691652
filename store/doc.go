// Package store persists minicri's records of sandboxes and containers so that
// a restarted daemon can rebuild its view of the node. It knows how to write
// and read records atomically and how to reserve names; it does not know what
// the records mean.
package store
