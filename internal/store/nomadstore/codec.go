package nomadstore

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// How a record lies in Nomad Variables. Nomad refuses a variable whose items (keys plus
// values) pass 64 KiB, and a big job's plan passes that, so a record is a head variable at
// <prefix>/<job>/<id> and, when it does not fit, chunk variables at <prefix>/<job>/<id>/c/<name>.
//
// The head holds the record; when the whole does not fit, the record without its
// allocations (and, in the extreme, without its events) plus the ordered list of chunk
// names. A chunk holds a slice of allocations (or events) as gzip'd, base64'd JSON.
// Allocations are cut into fixed index ranges, so an update that changes one allocation
// rewrites one chunk; a chunk's name carries the hash of its content, which is how a writer
// knows which chunks it may keep. Chunks are written under fresh names before the head
// points at them and deleted only after the head stopped pointing at them, so a reader
// never sees a half-written record: at worst it finds a chunk gone (a newer head exists)
// and reads again.
//
// A chunk written since the head last moved its chunks out may be carried in the head itself
// (an item "c.<name>" with the chunk's data) instead of a variable of its own: an update
// that changes one range is then one write, not a chunk's and then the head's. Such heads
// say format "2"; older readers refuse them with a clear message instead of looking for
// chunk variables that do not exist.
const (
	maxVariableSize = 65536 // Nomad's limit on a variable's items: keys plus values
	allocsPerChunk  = 128   // a fixed range, so that unchanged ranges keep their chunk
	eventsPerChunk  = 100
	headFormat      = "1"
	headFormatInner = "2" // some chunks are carried in the head
	// maxCarried bounds the bytes of chunks carried in a head: each write and each read of
	// the head carries them again.
	maxCarried = 48 << 10

	itemFormat    = "format"
	itemRecord    = "record"
	itemChunks    = "chunks"
	itemData      = "data"
	itemChunkData = "c." // + chunk name: a chunk carried in the head
)

// encodedRecord is a record cut into a head and chunks.
type encodedRecord struct {
	head   []byte   // the head's "record" item
	chunks []*chunk // in record order; empty when the head holds everything
}

// chunk is one slice of allocations or events.
type chunk struct {
	kind    byte   // 'a' allocations, 'e' events
	hash    string // of raw
	raw     []byte // the JSON array
	packed  string // raw compressed for its variable, when already computed
	name    string // set once the chunk has a variable (new or reused)
	carried bool   // its data is an item of the head, not a variable of its own
}

func (c *chunk) key() string { return string(c.kind) + c.hash }

// headItems are the items of the head variable.
func headItems(e *encodedRecord) (map[string]string, error) {
	items := map[string]string{itemFormat: headFormat, itemRecord: string(e.head)}
	if len(e.chunks) > 0 {
		names := make([]string, len(e.chunks))
		for i, c := range e.chunks {
			names[i] = c.name
			if c.carried {
				items[itemChunkData+c.name] = c.packed
				items[itemFormat] = headFormatInner
			}
		}
		items[itemChunks] = strings.Join(names, " ")
	}
	if n := itemsSize(items); n > maxVariableSize {
		return nil, fmt.Errorf("the restart record's head is %d bytes, more than Nomad's %d per variable even with its allocations moved out", n, maxVariableSize)
	}
	return items, nil
}

func itemsSize(items map[string]string) int {
	n := 0
	for k, v := range items {
		n += len(k) + len(v)
	}
	return n
}

// fitCache remembers, by content hash, chunks whose packed form was found to fit in a
// variable, so that a big range is compressed once, not at every update. nil is allowed.
type fitCache interface {
	fits(hash string) bool
	setFits(hash string)
	pack(raw []byte) (string, error)
}

// surelyTooBig is a count of allocations whose JSON cannot fit in one variable (an
// allocation's JSON is more than 200 bytes), so encoding the whole record first would
// be wasted work.
const surelyTooBig = maxVariableSize / 200

// encodeRecord cuts rec for storage. memo (may be nil) holds the ranges of allocations
// encoded last time: unchanged ones are not encoded again.
func encodeRecord(rec *restart.Record, fc fitCache, memo *allocMemo) (*encodedRecord, error) {
	const headSlack = 1024 // the other items of the head
	if len(rec.Allocs) < surelyTooBig {
		whole, err := json.Marshal(rec)
		if err != nil {
			return nil, fmt.Errorf("encoding restart %s: %w", rec.ID, err)
		}
		if len(whole)+headSlack <= maxVariableSize {
			return &encodedRecord{head: whole}, nil
		}
	}
	stripped := *rec
	stripped.Allocs = nil
	var chunks []*chunk
	for start := 0; start < len(rec.Allocs); start += allocsPerChunk {
		part := rec.Allocs[start:min(start+allocsPerChunk, len(rec.Allocs))]
		if cs := memo.lookup(start, part); cs != nil {
			chunks = append(chunks, cs...)
			continue
		}
		before := len(chunks)
		if err := cutRange('a', part, fc, &chunks); err != nil {
			return nil, err
		}
		memo.store(start, part, chunks[before:])
	}
	// A record cut in chunks has a long event log: its events go in chunks too, compressed,
	// which leaves the head room to carry the chunks an update changed (see writeChunks).
	if len(stripped.Events) > eventsPerChunk/2 {
		stripped.Events = nil
		if err := cutChunks('e', rec.Events, eventsPerChunk, fc, &chunks); err != nil {
			return nil, err
		}
	}
	head, err := json.Marshal(&stripped)
	if err != nil {
		return nil, err
	}
	// The head also carries the chunk names; leave them room.
	if stripped.Events != nil && len(head)+headSlack+len(chunks)*40 > maxVariableSize {
		stripped.Events = nil
		if err := cutChunks('e', rec.Events, eventsPerChunk, fc, &chunks); err != nil {
			return nil, err
		}
		if head, err = json.Marshal(&stripped); err != nil {
			return nil, err
		}
	}
	return &encodedRecord{head: head, chunks: chunks}, nil
}

// cutChunks appends the chunks of items, in fixed ranges of per, halving a range whose
// compressed form would not fit in a variable.
func cutChunks[T any](kind byte, items []T, per int, fc fitCache, out *[]*chunk) error {
	for start := 0; start < len(items); start += per {
		if err := cutRange(kind, items[start:min(start+per, len(items))], fc, out); err != nil {
			return err
		}
	}
	return nil
}

func cutRange[T any](kind byte, items []T, fc fitCache, out *[]*chunk) error {
	raw, err := json.Marshal(items)
	if err != nil {
		return err
	}
	c := newChunk(kind, raw)
	// base64 grows by 4/3 and gzip seldom grows, so below this bound the packed chunk
	// surely fits; above it, compress to know.
	if len(raw) > maxVariableSize*3/4-64 && (fc == nil || !fc.fits(c.hash)) {
		pk := pack
		if fc != nil {
			pk = fc.pack
		}
		packed, err := pk(raw)
		if err != nil {
			return err
		}
		if len(packed)+len(itemData) > maxVariableSize {
			if len(items) == 1 {
				return fmt.Errorf("one entry of the restart record is %d bytes, too large for a Nomad variable", len(raw))
			}
			half := len(items) / 2
			if err := cutRange(kind, items[:half], fc, out); err != nil {
				return err
			}
			return cutRange(kind, items[half:], fc, out)
		}
		c.packed = packed
		if fc != nil {
			fc.setFits(c.hash)
		}
	}
	*out = append(*out, c)
	return nil
}

func newChunk(kind byte, raw []byte) *chunk {
	sum := sha256.Sum256(raw)
	return &chunk{kind: kind, hash: hex.EncodeToString(sum[:8]), raw: raw}
}

// freshName names a new chunk variable: kind, content hash, and a random tail so that two
// writers racing with the same content never share (and never delete) each other's chunk.
func (c *chunk) freshName() string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return string(c.kind) + c.hash + "-" + hex.EncodeToString(r[:])
}

// chunkKey is the reuse key of a chunk name: its kind and hash.
func chunkKey(name string) string {
	if i := strings.IndexByte(name, '-'); i > 0 {
		return name[:i]
	}
	return name
}

// pack compresses a chunk for its variable.
func pack(raw []byte) (string, error) { return (*gzipPool)(nil).pack(raw) }

// gzipPool reuses gzip writers: each holds about a megabyte of compressor state, and a big
// record's writes compress a chunk or two each. A nil pool makes a writer per call.
type gzipPool struct{ pool sync.Pool }

func (p *gzipPool) pack(raw []byte) (string, error) {
	var buf bytes.Buffer
	var zw *gzip.Writer
	if p != nil {
		if w, ok := p.pool.Get().(*gzip.Writer); ok {
			zw = w
			zw.Reset(&buf)
		}
	}
	if zw == nil {
		var err error
		if zw, err = gzip.NewWriterLevel(&buf, gzip.BestSpeed); err != nil {
			return "", err
		}
	}
	if _, err := zw.Write(raw); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	if p != nil {
		p.pool.Put(zw)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// maxUnpacked bounds what one stored chunk may decompress to. The chunks written are cut
// to fit a variable, and their JSON compresses some tenfold, so a real one unpacks to a
// megabyte or two; gzip can inflate a variable a thousandfold, and a record names many
// chunks, so without a bound a crafted variable could make every reader use gigabytes.
const maxUnpacked = 16 << 20

func unpack(data string) ([]byte, error) {
	z, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	raw, err := io.ReadAll(io.LimitReader(zr, maxUnpacked+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxUnpacked {
		return nil, fmt.Errorf("a stored chunk unpacks to more than %d MiB, more than nomad-restart ever writes in one", maxUnpacked>>20)
	}
	return raw, nil
}

// decodeHead reads a head's items: the record (maybe without allocations and events) and
// the names of its chunks (those it carries are items itemChunkData+name).
func decodeHead(items map[string]string) (*restart.Record, []string, error) {
	if f := items[itemFormat]; f != headFormat && f != headFormatInner {
		return nil, nil, fmt.Errorf("unknown restart record format %q (written by a newer nomad-restart?)", f)
	}
	var rec restart.Record
	if err := json.Unmarshal([]byte(items[itemRecord]), &rec); err != nil {
		return nil, nil, fmt.Errorf("corrupt restart record: %w", err)
	}
	return &rec, strings.Fields(items[itemChunks]), nil
}

// assemble puts the chunks' contents (raw JSON arrays, in head order) back into rec.
func assemble(rec *restart.Record, names []string, raws [][]byte) error {
	if len(names) == 0 {
		return nil
	}
	rec.Allocs = []restart.AllocProgress{}
	events := false
	for i, name := range names {
		switch name[0] {
		case 'a':
			var part []restart.AllocProgress
			if err := json.Unmarshal(raws[i], &part); err != nil {
				return fmt.Errorf("corrupt chunk %s: %w", name, err)
			}
			rec.Allocs = append(rec.Allocs, part...)
		case 'e':
			if !events {
				rec.Events, events = []restart.Event{}, true
			}
			var part []restart.Event
			if err := json.Unmarshal(raws[i], &part); err != nil {
				return fmt.Errorf("corrupt chunk %s: %w", name, err)
			}
			rec.Events = append(rec.Events, part...)
		default:
			return fmt.Errorf("corrupt chunk name %q", name)
		}
	}
	return nil
}
