package store

import (
	"encoding/binary"
	"math/bits"
	"sync"
)

// s2DictEncode appends src as an s2 block with the notification
// dictionary (what notificationDict().Decode reads) to dst. A
// notification is a kilobyte or two, and s2's own dictionary encoder
// clears a 64 KiB table on its stack for every block, whatever its size:
// ~40% of its time on a 1 KiB Stripe event, and the stack of the goroutine
// that calls it grown past 64 KiB. This encoder finds matches the same
// way (6-byte hashes, greedy, in the block and in the dictionary) with a
// table the size of the block. Blocks past s2DictOwnMax go to s2's.
//
// The block format, as s2's decoder reads it: the decoded length as a
// uvarint, then literals and copies; a copy whose offset reaches past the
// start of the block copies from the end of the dictionary, and must end
// within it. No repeat codes are written.
func s2DictEncode(dst, src []byte) []byte {
	if len(src) > s2DictOwnMax || len(src) < 16 {
		z := notificationDict().Encode(dst[len(dst):cap(dst)], src)
		return append(dst, z...)
	}
	dt := s2DictTable()
	dict := notificationDictBytes
	dst = binary.AppendUvarint(dst, uint64(len(src)))
	// As s2's: a block that does not shrink by at least 1/32 is stored
	// as one literal (which the caller then stores raw).
	start := len(dst)
	limit := start + len(src) - len(src)>>5 - 5

	// The block's table: a position+1 per hash, 0 for none. Its size is
	// the block's, rounded up to a power of two, at least 256 entries.
	tb := uint(8)
	for 1<<tb < len(src) && tb < s2OwnTableBits {
		tb++
	}
	tp := s2Tables.Get().(*[1 << s2OwnTableBits]uint16)
	defer s2Tables.Put(tp)
	table := tp[:1<<tb]
	clear(table)

	nextEmit, s := 0, 0
	sLimit := len(src) - 8 // each look reads 8 bytes
	for s <= sLimit {
		cv := binary.LittleEndian.Uint64(src[s:])
		h := hash6(cv, tb)
		cand := int(table[h]) - 1
		table[h] = uint16(s + 1)

		// The longer of a match in the block and one in the dictionary.
		off, n := 0, 0
		if cand >= 0 && uint32(cv) == binary.LittleEndian.Uint32(src[cand:]) {
			n = 4 + matchLen(src[cand+4:], src[s+4:])
			off = s - cand
		}
		if dc := int(dt[hash6(cv, s2DictTableBits)]) - 1; dc >= 0 && dc+4 <= len(dict) &&
			uint32(cv) == binary.LittleEndian.Uint32(dict[dc:]) {
			if dn := 4 + matchLen(dict[dc+4:], src[s+4:]); dn > n {
				// Offset past the block's start: s back to it, then
				// len(dict)-dc into the dictionary.
				off, n = s+len(dict)-dc, dn
			}
		}
		if n == 0 {
			s += 1 + (s-nextEmit)>>5
			continue
		}
		dst = appendS2Literal(dst, src[nextEmit:s])
		dst = appendS2Copy(dst, off, n)
		s += n
		nextEmit = s
		if len(dst) > limit {
			break
		}
	}
	if dst = appendS2Literal(dst, src[nextEmit:]); len(dst) > limit {
		dst = appendS2Literal(dst[:start], src)
	}
	return dst
}

const (
	// s2DictOwnMax: longer blocks go to s2's encoder, whose table costs
	// them little. It keeps every copy's offset below 1<<16 (the block's
	// start plus the dictionary), within s2's MaxDictSrcOffset.
	s2DictOwnMax    = 16 << 10
	s2OwnTableBits  = 14 // 1<<14 positions hold s2DictOwnMax
	s2DictTableBits = 14
)

// s2Tables holds s2DictEncode's block tables.
var s2Tables = sync.Pool{New: func() any { return new([1 << s2OwnTableBits]uint16) }}

// s2DictTable maps a 6-byte hash to its last position+1 in the
// dictionary.
var s2DictTable = sync.OnceValue(func() *[1 << s2DictTableBits]uint16 {
	var t [1 << s2DictTableBits]uint16
	d := notificationDictBytes
	for i := 0; i+8 <= len(d); i++ {
		t[hash6(binary.LittleEndian.Uint64(d[i:]), s2DictTableBits)] = uint16(i + 1)
	}
	return &t
})

// matchLen is the length of a's and b's common prefix.
func matchLen(a, b []byte) int {
	n := 0
	for len(a)-n >= 8 && len(b)-n >= 8 {
		if x := binary.LittleEndian.Uint64(a[n:]) ^ binary.LittleEndian.Uint64(b[n:]); x != 0 {
			return n + bits.TrailingZeros64(x)>>3
		}
		n += 8
	}
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// hash6 hashes the low 6 bytes of u into bits bits (s2's).
func hash6(u uint64, bits uint) uint32 {
	const prime6bytes = 227718039650203
	return uint32(((u << (64 - 48)) * prime6bytes) >> ((64 - bits) & 63))
}

// appendS2Literal appends lit as literals.
func appendS2Literal(dst, lit []byte) []byte {
	if len(lit) == 0 {
		return dst
	}
	switch n := uint32(len(lit) - 1); {
	case n < 60:
		dst = append(dst, byte(n)<<2)
	case n < 1<<8:
		dst = append(dst, 60<<2, byte(n))
	case n < 1<<16:
		dst = append(dst, 61<<2, byte(n), byte(n>>8))
	case n < 1<<24:
		dst = append(dst, 62<<2, byte(n), byte(n>>8), byte(n>>16))
	default:
		dst = append(dst, 63<<2, byte(n), byte(n>>8), byte(n>>16), byte(n>>24))
	}
	return append(dst, lit...)
}

// appendS2Copy appends a copy of n bytes from off back, in pieces of at
// most 64 (each piece keeps the offset: a piece of a copy from the
// dictionary still reaches past the block's start).
func appendS2Copy(dst []byte, off, n int) []byte {
	const (
		tagCopy1 = 0x01
		tagCopy2 = 0x02
		tagCopy4 = 0x03
	)
	for n > 0 {
		switch {
		case n >= 4 && n <= 11 && off < 1<<11:
			return append(dst, tagCopy1|byte(n-4)<<2|byte(off>>8)<<5, byte(off))
		case off < 1<<16:
			k := min(n, 64)
			if n-k > 0 && n-k < 4 && off < 1<<11 {
				k = n - 4 // leave a piece copy1 can take
			}
			dst = append(dst, tagCopy2|byte(k-1)<<2, byte(off), byte(off>>8))
			n -= k
		default:
			k := min(n, 64)
			dst = append(dst, tagCopy4|byte(k-1)<<2, byte(off), byte(off>>8), byte(off>>16), byte(off>>24))
			n -= k
		}
	}
	return dst
}
