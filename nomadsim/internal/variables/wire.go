package variables

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// lock is a variable lock as Nomad stores it.
type lock struct {
	ID        string
	TTL       time.Duration
	LockDelay time.Duration
}

// lockJSON is a lock as Nomad's servers encode it: durations as Go duration strings, ""
// for zero.
type lockJSON struct {
	TTL       string
	LockDelay string
	ID        string
}

func (l *lock) wire() *lockJSON {
	if l == nil {
		return nil
	}
	out := &lockJSON{ID: l.ID}
	if l.TTL != 0 {
		out.TTL = l.TTL.String()
	}
	if l.LockDelay != 0 {
		out.LockDelay = l.LockDelay.String()
	}
	return out
}

// varJSON is a variable as Nomad's servers encode it (VariableDecrypted): its metadata,
// then Items, omitted when empty, which is how a conflict on a lock or a release answers.
// (encoding/json writes the embedded metadata's fields in its place, first.)
type varJSON struct {
	metaJSON
	Items map[string]string `json:",omitempty"`
}

// metaJSON is an entry of /v1/vars and the body of a lock renewal (VariableMetadata).
type metaJSON struct {
	Namespace   string
	Path        string
	Lock        *lockJSON `json:",omitempty"`
	CreateIndex uint64
	CreateTime  int64
	ModifyIndex uint64
	ModifyTime  int64
}

// request is the body of a write: the fields of a variable Nomad reads.
type request struct {
	Namespace string
	Path      string
	Items     map[string]string
	Lock      *lock
}

// decodeRequest reads a request body as Nomad's agent does; lock durations may be strings
// ("15s") or numbers of nanoseconds. An empty body decodes to an empty request.
func decodeRequest(body io.Reader) (request, error) {
	var raw struct {
		Namespace string
		Path      string
		Items     map[string]string
		Lock      *struct {
			ID        string
			TTL       any
			LockDelay any
		}
	}
	if err := json.NewDecoder(body).Decode(&raw); err != nil && err != io.EOF {
		return request{}, err
	}
	req := request{Namespace: raw.Namespace, Path: raw.Path, Items: raw.Items}
	if raw.Lock != nil {
		ttl, err := duration(raw.Lock.TTL)
		if err != nil {
			return request{}, err
		}
		delay, err := duration(raw.Lock.LockDelay)
		if err != nil {
			return request{}, err
		}
		req.Lock = &lock{ID: raw.Lock.ID, TTL: ttl, LockDelay: delay}
	}
	return req, nil
}

func duration(v any) (time.Duration, error) {
	switch d := v.(type) {
	case nil:
		return 0, nil
	case string:
		if d == "" {
			return 0, nil
		}
		return time.ParseDuration(d)
	case float64:
		return time.Duration(d), nil
	}
	return 0, fmt.Errorf("invalid duration %v", v)
}
