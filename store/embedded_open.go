package store

import (
	"encoding/binary"
	"io"
	"os"
)

// readAhead reads the bbolt file at path through once, in order, when its
// last commit wrote no freelist (a process that did not get to Close), so
// that the open's rebuild of the freelist finds the file in the page cache.
// That rebuild walks every page of the file through bbolt's memory map,
// which bbolt maps for random access (no read-ahead): on a file out of the
// page cache each page is a read of its own, 269k of them and 23.6 s at 1M
// keys (BenchmarkEmbeddedOpen), 1.0–3.9 s with the file read in order
// first, as the kernel then reads ahead (posix_fadvise WILLNEED instead,
// tried, left the walk as slow). A file closed cleanly is not read: its
// open reads the freelist page alone. Any error leaves the open to find it.
func readAhead(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	if !lacksFreelist(f) {
		return
	}
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Read(buf); err != nil {
			return
		}
	}
}

// bbolt's meta page (its version 2): a page header of 16 bytes, then magic,
// version, page size and flags (4 bytes each), the root bucket (16), the
// freelist's page id, the page count and the transaction id (8 each). bbolt
// writes them in the machine's byte order.
const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	boltNoFreelist = 1<<64 - 1
	metaAt         = 16
)

// lacksFreelist reports whether the newer of the file's two meta pages
// says its commit wrote no freelist; false when it cannot tell.
func lacksFreelist(f *os.File) bool {
	var p0 [4096]byte
	if _, err := io.ReadFull(f, p0[:]); err != nil {
		return false
	}
	m0, ok0 := boltMeta(p0[metaAt:])
	if !ok0 {
		return false
	}
	newest := m0
	var p1 [metaAt + 64]byte
	if _, err := f.ReadAt(p1[:], int64(m0.pageSize)); err == nil {
		if m1, ok := boltMeta(p1[metaAt:]); ok && m1.txid > m0.txid {
			newest = m1
		}
	}
	return newest.freelist == boltNoFreelist
}

type boltMetaFields struct {
	pageSize uint32
	freelist uint64
	txid     uint64
}

func boltMeta(b []byte) (boltMetaFields, bool) {
	e := binary.NativeEndian
	if len(b) < 64 || e.Uint32(b) != boltMagic || e.Uint32(b[4:]) != boltVersion {
		return boltMetaFields{}, false
	}
	m := boltMetaFields{pageSize: e.Uint32(b[8:]), freelist: e.Uint64(b[32:]), txid: e.Uint64(b[48:])}
	return m, m.pageSize >= 1024
}
