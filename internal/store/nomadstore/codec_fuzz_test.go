package nomadstore

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/fuzztest"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// packedOr is raw packed for a chunk's variable, or raw as it is when packed is false: the
// fuzzer mutates the JSON inside, and the packing itself (base64, gzip) as stored.
func packedOr(t *testing.T, raw []byte, packed bool) string {
	if !packed {
		return string(raw)
	}
	data, err := pack(raw)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// FuzzRecordDecode decodes any head variable and its chunks, as the store reads a restart
// record (load): the head's format, record and chunk list, each chunk carried in the head
// or in a variable of its own, packed or not. The answer is an error (one line) or a
// record, never both, never a panic or a hang.
func FuzzRecordDecode(f *testing.F) {
	small, err := json.Marshal(bigRecord(3))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(headFormat, string(small), "", []byte(nil), []byte(nil), true)
	big, err := encodeRecord(bigRecord(300), nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(headFormatInner, string(big.head), "a0011 e22-33", big.chunks[0].raw, []byte(`[{"Seq":1,"Type":"warning","Message":"x"}]`), true)
	f.Add(headFormat, string(big.head), "a1", []byte(`[{"ID":"x","Batch":-1}]`), []byte(nil), true)
	f.Add(headFormat, "{", "x1", []byte("not base64"), []byte("H4sI"), false)
	f.Add("3", "{}", "", []byte(nil), []byte(nil), true)
	f.Add(headFormat, "null", "a1 a2 a3", []byte(`[]`), []byte(`null`), true)
	f.Fuzz(func(t *testing.T, format, record, chunks string, raw1, raw2 []byte, packed bool) {
		items := map[string]string{itemFormat: format, itemRecord: record, itemChunks: chunks}
		// The first chunk is carried in the head, the others are variables of their own.
		variables := map[string]string{}
		for i, name := range strings.Fields(chunks) {
			raw := raw1
			if i > 0 {
				raw = raw2
			}
			if i == 0 {
				items[itemChunkData+name] = packedOr(t, raw, packed)
			} else {
				variables[name] = packedOr(t, raw, packed)
			}
		}
		fuzztest.Bound(t, "decoding a record", func() {
			rec, err := decodeRecord(items, variables)
			if err != nil {
				if rec != nil {
					t.Errorf("decode gave a record and the error %v", err)
				}
				fuzztest.OneLine(t, "decode", err)
				return
			}
			if rec == nil {
				t.Errorf("decode gave neither a record nor an error")
			}
		})
	})
}

// decodeRecord is the store's load without Nomad: the head's items, then each chunk's data
// from the head or from variables (by name), unpacked and assembled.
func decodeRecord(items, variables map[string]string) (*restart.Record, error) {
	rec, names, err := decodeHead(items)
	if err != nil {
		return nil, err
	}
	raws := make([][]byte, len(names))
	for i, name := range names {
		data, ok := items[itemChunkData+name]
		if !ok {
			data = variables[name]
		}
		if raws[i], err = unpack(data); err != nil {
			return nil, err
		}
	}
	if err := assemble(rec, names, raws); err != nil {
		return nil, err
	}
	return rec, nil
}

// FuzzRecordRoundTrip writes records of any size and text (job, allocation names, event
// messages) as the store cuts them, then reads them back: the record read is the record
// written, whether it fits its head or is cut in chunks, carried or not.
func FuzzRecordRoundTrip(f *testing.F) {
	f.Add("web", "web.web[0]", "restarting", uint16(3), uint8(2), false)
	f.Add("a\"b\\c", "é\u2028", strings.Repeat("x", 400), uint16(400), uint8(120), true)
	f.Add("", "", "", uint16(0), uint8(0), false)
	f.Fuzz(func(t *testing.T, job, name, message string, allocs uint16, events uint8, carry bool) {
		if !utf8.ValidString(job) || !utf8.ValidString(name) || !utf8.ValidString(message) {
			return // JSON writes invalid UTF-8 as U+FFFD: such text does not come back as written
		}
		rec := bigRecord(int(allocs % 700))
		rec.JobID = job
		for i := range rec.Allocs {
			rec.Allocs[i].Name = name
		}
		for i := range int(events) {
			rec.Events = append(rec.Events, restart.Event{Seq: uint64(i + 1), Time: time.Unix(int64(i), 0).UTC(), Type: restart.EventWarning, Message: message})
		}
		fuzztest.Bound(t, "a record's round trip", func() {
			e, err := encodeRecord(rec, nil, nil)
			if err != nil {
				return // too large for Nomad's variables: refused when written
			}
			variables := map[string]string{}
			for _, c := range e.chunks {
				c.name = c.freshName()
				if c.packed == "" {
					if c.packed, err = pack(c.raw); err != nil {
						t.Errorf("packing: %v", err)
						return
					}
				}
				c.carried = carry && len(c.packed) < maxCarried/4
				if !c.carried {
					variables[c.name] = c.packed
				}
			}
			items, err := headItems(e)
			if err != nil {
				return // a head too large: refused when written
			}
			got, err := decodeRecord(items, variables)
			if err != nil {
				t.Errorf("a record of %d allocations and %d events does not read back: %v", len(rec.Allocs), len(rec.Events), err)
				return
			}
			want := *rec
			if want.Allocs == nil && got.Allocs != nil && len(got.Allocs) == 0 {
				got.Allocs = nil
			}
			if !reflect.DeepEqual(got, &want) {
				t.Errorf("a record of %d allocations and %d events reads back different", len(rec.Allocs), len(rec.Events))
			}
		})
	})
}

// FuzzFleetVariables decodes any fleet record or member marker variable, as the fleet store
// reads them: an error naming the variable, or a fleet whose path names it (in the
// variable's namespace), or a marker whose jobs are sorted (Has searches them).
func FuzzFleetVariables(f *testing.F) {
	s := NewFleets(nomadvars.New(nil, nomadvars.Options{}), Options{})
	const id = "0f0e0d0c-0000-4000-8000-000000000002"
	rec := &fleet.Record{Fleet: fleet.Fleet{ID: id, Options: fleet.DefaultOptions(), Status: restart.StatusRunning,
		Jobs: []fleet.Job{{Namespace: "default", JobID: "web", Status: fleet.JobPending}}}, Namespace: "default"}
	b, err := json.Marshal(rec)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(fleetFormat, b, true, s.fleetPath(id, fleetRecordName), false)
	f.Add(fleetFormat, b, true, s.fleetPath("other", fleetRecordName), false)
	f.Add(memberFormat, []byte(`{"home":"","jobs":["web","api","api"]}`), true, s.MemberPath(id), true)
	f.Add("2", []byte(`{}`), false, "", true)
	f.Fuzz(func(t *testing.T, format string, raw []byte, packed bool, path string, member bool) {
		data := packedOr(t, raw, packed)
		fuzztest.Bound(t, "decoding a fleet variable", func() {
			if member {
				v := &nomadvars.Variable{Namespace: "team", Path: path, Items: map[string]string{memberItemFormat: format, memberItemData: data}}
				m, err := decodeMember(v)
				if err != nil {
					fuzztest.Names(t, "member marker", err, path)
					fuzztest.OneLine(t, "member marker", err)
					return
				}
				for i := 1; i < len(m.Jobs); i++ {
					if m.Jobs[i-1] > m.Jobs[i] {
						t.Errorf("member marker %q: jobs %q are not sorted", raw, m.Jobs)
					}
				}
				for _, j := range m.Jobs {
					if !m.Has(j) {
						t.Errorf("member marker %q does not have its job %q", raw, j)
					}
				}
				return
			}
			v := &nomadvars.Variable{Namespace: "team", Path: path, Items: map[string]string{fleetItemFormat: format, fleetItemData: data}}
			fl, err := s.decode(v)
			if err != nil {
				if fl != nil {
					t.Errorf("decode gave a fleet and the error %v", err)
				}
				fuzztest.Names(t, "fleet variable", err, path)
				fuzztest.OneLine(t, "fleet variable", err)
				return
			}
			if s.fleetPath(fl.ID, fleetRecordName) != path || fl.Namespace != "team" {
				t.Errorf("fleet %q of namespace %q read from %q in team", fl.ID, fl.Namespace, path)
			}
		})
	})
}
