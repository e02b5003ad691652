// Package store persists minicri's records of sandboxes and containers so that
// a restarted daemon can rebuild its view of the node, and keeps in memory the
// caller's object of each, which holds its record (Table, Slot): the one map
// of a kind, so that an object comes and goes with its record. It knows how to
// write and read records atomically and how to reserve names; it does not know
// what the records or the objects mean.
package store
