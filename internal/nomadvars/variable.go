package nomadvars

import (
	"time"

	"github.com/hashicorp/nomad/api"
)

// Variable is one Nomad variable as this package reads and writes it: its callers never
// see the api client's types, so that how a variable travels stays this package's business.
type Variable struct {
	Namespace, Path string
	// Items are the variable's contents; nil when the token may write but not read it.
	Items                    map[string]string
	CreateIndex, ModifyIndex uint64
	ModifyTime               time.Time
	// Locked says a lock holds the variable: its holder has not released it and its TTL
	// has not passed.
	Locked bool
}

// Metadata is a variable as a listing names it: where it is and when it changed, without
// its items.
type Metadata struct {
	Namespace, Path          string
	CreateIndex, ModifyIndex uint64
	ModifyTime               time.Time
}

// DefaultLockTTL and DefaultLockDelay are Nomad's own defaults for a variable lock: how
// long it lives unrenewed, and how long after it expired before another may take it.
const (
	DefaultLockTTL   = api.DefaultLockTTL
	DefaultLockDelay = api.DefaultLockDelay
)

// toAPI is v as the api client sends it.
func (v *Variable) toAPI() *api.Variable {
	return &api.Variable{Namespace: v.Namespace, Path: v.Path, Items: v.Items, CreateIndex: v.CreateIndex, ModifyIndex: v.ModifyIndex}
}

// fromAPI is the api client's variable in this package's terms; nil for nil.
func fromAPI(v *api.Variable) *Variable {
	if v == nil {
		return nil
	}
	out := &Variable{Namespace: v.Namespace, Path: v.Path, Items: v.Items, CreateIndex: v.CreateIndex, ModifyIndex: v.ModifyIndex,
		Locked: v.Lock != nil}
	if v.ModifyTime != 0 {
		out.ModifyTime = time.Unix(0, v.ModifyTime)
	}
	return out
}

// metadataFromAPI is a listing in this package's terms, leaving out nil entries (a null
// in Nomad's answer).
func metadataFromAPI(metas []*api.VariableMetadata) []*Metadata {
	out := make([]*Metadata, 0, len(metas))
	for _, m := range metas {
		if m == nil {
			continue
		}
		md := &Metadata{Namespace: m.Namespace, Path: m.Path, CreateIndex: m.CreateIndex, ModifyIndex: m.ModifyIndex}
		if m.ModifyTime != 0 {
			md.ModifyTime = time.Unix(0, m.ModifyTime)
		}
		out = append(out, md)
	}
	return out
}
