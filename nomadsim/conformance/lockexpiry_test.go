package conformance

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// A lock that is not renewed expires and, after its lock delay, can be taken again. Nomad
// checks the TTL with a grace of the TTL again (observed on a real agent: TTL 10s, delay
// 3s, free again after about 23 s), so only lower bounds are checked, on the target's clock.
func TestVariableLockExpiry(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		path := "nomad-restart/" + tg.id("lock-expiry")
		tg.deleteVarLater(t, path)
		const ttl, delay = 10 * time.Second, 3 * time.Second
		acquire := func(holder string) rawResponse {
			body := varBody(path, map[string]string{"holder": holder}, fmt.Sprintf(`{"TTL":%q,"LockDelay":%q}`, ttl, delay))
			return tg.do(t, "PUT", "/v1/var/"+path+"?lock-acquire", tg.token, strings.NewReader(body))
		}
		start := tg.now()
		if r := acquire("a"); r.status != 200 {
			t.Fatalf("acquire: %d %q", r.status, r.body)
		}
		if r := tg.do(t, "PUT", "/v1/var/"+path+"?lock-acquire", tg.token, strings.NewReader(varBody(path, nil, `{"TTL":"10s"}`))); r.status != 409 {
			t.Fatalf("acquire of a held lock: %d %q, want 409", r.status, r.body)
		}

		// Poll at a tenth of the delay, on the target's time scale: this is the race a
		// driver taking over an expired lease runs.
		poll := delay / 10
		if tg.sim != nil {
			poll = tg.sim.RealDuration(poll)
		}
		ctx := tg.ctx(t)
		for {
			r := acquire("b")
			if r.status == 200 {
				v := decodeVar(t, "re-acquire", r)
				if v.Lock == nil || v.Items["holder"] != "b" {
					t.Errorf("re-acquired variable %+v", v)
				}
				break
			}
			if r.status != 409 {
				t.Fatalf("acquire while held or delayed: %d %q, want 409", r.status, r.body)
			}
			if ctx.Err() != nil {
				t.Fatalf("lock never free again within %v", tg.patience)
			}
			time.Sleep(poll)
		}
		if free := tg.now().Sub(start); free < ttl+delay {
			t.Errorf("an unrenewed lock was free again after %v, before its TTL %v and lock delay %v", free, ttl, delay)
		}
		var v *api.Variable
		v, _, err := tg.api.Variables().Read(path, nil)
		if err != nil || v.Lock == nil {
			t.Errorf("variable after re-acquire: %+v (err %v), want it locked", v, err)
		}
	})
}
