package cluster

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestObserveDatesHearsEachAnswersDate(t *testing.T) {
	dated := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			w.Header().Set("Date", "not a date")
		} else {
			w.Header().Set("Date", dated.Format(http.TimeFormat))
		}
		_, _ = w.Write([]byte("{}"))
	}))
	defer srv.Close()
	var heard []time.Time
	c := &http.Client{Transport: ObserveDates(http.DefaultTransport, func(d time.Time) { heard = append(heard, d) })}
	for _, p := range []string{"/good", "/bad"} {
		resp, err := c.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if len(heard) != 1 || !heard[0].Equal(dated) {
		t.Fatalf("heard %v, want only %v", heard, dated)
	}
	if ObserveDates(http.DefaultTransport, nil) != http.DefaultTransport {
		t.Fatal("without an observer the transport should be left as it is")
	}
}
