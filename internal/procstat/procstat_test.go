package procstat

import (
	"os"
	"testing"
)

func TestParse(t *testing.T) {
	tail := " 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 987654 23 24\n" // fields 7 to 24
	for _, tc := range []struct {
		name string
		in   string
		want Stat
		bad  bool
	}{
		{name: "plain", in: "42 (sh) S 1 42 77" + tail, want: Stat{PID: 42, State: 'S', Session: 77, StartTime: 987654}},
		{name: "name with spaces and parens", in: "7 (a) b (c)) Z 1 7 7" + tail, want: Stat{PID: 7, State: 'Z', Session: 7, StartTime: 987654}},
		{name: "no name", in: "42 sh S 1", bad: true},
		{name: "short", in: "42 (sh) S 1 2 3", bad: true},
		{name: "empty", in: "", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			if tc.bad {
				if err == nil {
					t.Fatalf("Parse(%q) = %+v, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestReadSelf(t *testing.T) {
	s, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.PID != os.Getpid() || !s.Live() || s.StartTime == 0 {
		t.Fatalf("Read(self) = %+v; want our pid, live, a start time", s)
	}
	if Live(1 << 30) {
		t.Fatal("Live(an impossible pid) = true")
	}
}
