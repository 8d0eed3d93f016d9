package output

import (
	"bytes"
	"strings"
	"testing"
)

// TestMarshalJSONAddsTheFormatVersion checks the one helper every -json output goes
// through: FormatVersion first in an object and in each object of an array, the other
// fields as encoding/json writes them, anything else untouched.
func TestMarshalJSONAddsTheFormatVersion(t *testing.T) {
	type inner struct{ X int }
	type record struct {
		ID    string
		Inner inner
		List  []inner
		Note  string `json:",omitempty"`
		HTML  string
	}
	cases := []struct {
		name string
		in   any
		want string
	}{
		{"object", record{ID: "a", Inner: inner{1}, List: []inner{{2}}, HTML: "<b>"},
			`{"FormatVersion":1,"ID":"a","Inner":{"X":1},"List":[{"X":2}],"HTML":"\u003cb\u003e"}`},
		{"empty object", struct{}{}, `{"FormatVersion":1}`},
		{"map", map[string]int{"b": 2, "a": 1}, `{"FormatVersion":1,"a":1,"b":2}`},
		{"array of objects", []any{record{ID: "a"}, map[string]int{}},
			`[{"FormatVersion":1,"ID":"a","Inner":{"X":0},"List":null,"HTML":""},{"FormatVersion":1}]`},
		{"empty array", []record{}, `[]`},
		{"array of strings", []string{"a"}, `["a"]`},
		{"string", "a", `"a"`},
		{"null", nil, `null`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Marshal(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("Marshal:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestWriteJSONIsIndented keeps the indented outputs (status, watches, schedules, demo,
// version) as they were, with the version first.
func TestWriteJSONIsIndented(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, []map[string]int{{"a": 1}}); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		`[`,
		`    {`,
		`        "FormatVersion": 1,`,
		`        "a": 1`,
		`    }`,
		`]`,
		``,
	}, "\n")
	if b.String() != want {
		t.Errorf("WriteJSON wrote:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestJSONLineIsOneLine keeps the streamed outputs (run, attach, resume) one object a line.
func TestJSONLineIsOneLine(t *testing.T) {
	var b bytes.Buffer
	p := &Printer{Out: &b, JSON: true}
	p.JSONLine(map[string]string{"Message": "two\nlines"})
	if got, want := b.String(), `{"FormatVersion":1,"Message":"two\nlines"}`+"\n"; got != want {
		t.Errorf("JSONLine wrote %q, want %q", got, want)
	}
}
