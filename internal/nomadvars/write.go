package nomadvars

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/hashicorp/nomad/api"
)

// Write stores v with check-and-set on v.ModifyIndex: 0 creates only, otherwise the stored
// variable must still be at that index. It returns the variable as written, or
// *ConflictError.
//
// A write whose answer was lost (a dropped connection, a 5xx after Nomad applied it) is
// sent again; when that meets a conflict with a variable holding exactly v's items, the
// first one landed and Write succeeds. Callers make that safe by writing items no other
// writer writes (a record holds its write time; a chunk's name is fresh).
func (c *Client) Write(ctx context.Context, v *Variable) (*Variable, error) {
	in := v.toAPI()
	in.Namespace = Namespace(v.Namespace)
	lost := false
	out, err := do(ctx, c, opWrite, in.Namespace, in.Path, func(ctx context.Context) (*api.Variable, error) {
		var (
			out *api.Variable
			err error
		)
		attempt := *in // the api client may change what it sends
		if in.ModifyIndex == 0 {
			out, _, err = c.api.Variables().CheckedCreate(&attempt, c.writeOptions(ctx, in.Namespace))
		} else {
			out, _, err = c.api.Variables().CheckedUpdate(&attempt, c.writeOptions(ctx, in.Namespace))
		}
		var conflict api.ErrCASConflict
		switch {
		case err == nil:
			return out, nil
		case lost && errors.As(err, &conflict):
			return c.landed(ctx, in, conflict)
		}
		lost = lost || !errors.As(err, &conflict)
		return nil, err
	})
	return fromAPI(out), err
}

// landed is Write's answer to a conflict met after a lost answer: the variable as written
// when it holds in's items (the lost write landed), else the conflict.
func (c *Client) landed(ctx context.Context, in *api.Variable, conflict api.ErrCASConflict) (*api.Variable, error) {
	cur := conflict.Conflict
	if cur != nil && cur.ModifyIndex != 0 && cur.Items == nil {
		// Redacted (the token may write but not read): read it to compare.
		v, _, err := c.api.Variables().Peek(in.Path, c.queryOptions(ctx, in.Namespace, Wait{}))
		if err != nil {
			return nil, conflict // cannot tell: the conflict is what is known
		}
		cur = v
	}
	if cur != nil && cur.ModifyIndex != 0 && maps.Equal(cur.Items, in.Items) {
		return cur, nil
	}
	return nil, conflict
}

// Delete removes the variable at path in namespace ns, whatever its index; a missing one
// is no error.
func (c *Client) Delete(ctx context.Context, ns, path string) error {
	ns = Namespace(ns)
	_, err := do(ctx, c, opDestroy, ns, path, func(ctx context.Context) (struct{}, error) {
		_, err := c.api.Variables().Delete(path, c.writeOptions(ctx, ns))
		return struct{}{}, err
	})
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// DeleteAt removes the variable at path in namespace ns if it is still at index
// (check-and-set), or returns *ConflictError. A delete whose answer was lost is sent
// again; a conflict then with no variable left means the first one landed.
func (c *Client) DeleteAt(ctx context.Context, ns, path string, index uint64) error {
	ns = Namespace(ns)
	lost := false
	_, err := do(ctx, c, opDestroy, ns, path, func(ctx context.Context) (struct{}, error) {
		_, err := c.api.Variables().CheckedDelete(path, index, c.writeOptions(ctx, ns))
		var conflict api.ErrCASConflict
		switch {
		case err == nil:
			return struct{}{}, nil
		case lost && errors.As(err, &conflict) && (conflict.Conflict == nil || conflict.Conflict.ModifyIndex == 0):
			return struct{}{}, nil
		}
		lost = lost || !errors.As(err, &conflict)
		return struct{}{}, err
	})
	return err
}

// Overwrite stores v whatever the variable at its path holds: it creates it, or writes it
// at the stored index, for a variable with one writer at a time (a marker written by a
// fleet's or schedule's creator). It gives up, with an error, when the variable keeps
// changing under it.
func (c *Client) Overwrite(ctx context.Context, v *Variable) error {
	for range 5 {
		_, err := c.Write(ctx, v)
		var conflict *ConflictError
		if !errors.As(err, &conflict) {
			return err
		}
		next := *v
		next.ModifyIndex = 0
		if conflict.Current != nil {
			next.ModifyIndex = conflict.Current.ModifyIndex
		}
		v = &next
	}
	return fmt.Errorf("variable %q in namespace %q kept changing while it was written", v.Path, v.Namespace)
}
