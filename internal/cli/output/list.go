package output

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteList prints the answer of a list command (status, schedules): with -json the whole
// list, an empty array rather than null; else a line saying there are no items (of job,
// when given), or a table of header and one row an item. noun names the items ("restarts").
func WriteList[T any](w io.Writer, list []T, jsonOut bool, noun, job, header string, row func(T) string) error {
	if jsonOut {
		if list == nil {
			list = []T{}
		}
		return WriteJSON(w, list)
	}
	if len(list) == 0 {
		if job != "" {
			fmt.Fprintf(w, "No %s of job %q\n", noun, job)
		} else {
			fmt.Fprintf(w, "No %s\n", noun)
		}
		return nil
	}
	return WriteTable(w, list, header, row)
}

// WriteSection prints a titled table of the items after a blank line, or nothing when there
// are none.
func WriteSection[T any](w io.Writer, title string, list []T, header string, row func(T) string) error {
	if len(list) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\n%s\n", title)
	return WriteTable(w, list, header, row)
}

// WriteTable prints header and a row for each item as aligned columns (cells separated by
// tabs).
func WriteTable[T any](w io.Writer, list []T, header string, row func(T) string) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, item := range list {
		fmt.Fprintln(tw, row(item))
	}
	return tw.Flush()
}
