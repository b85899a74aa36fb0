package sdk_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	sdk "github.com/tetherhq/tether/sdk/go"
)

// tokenChildEnv makes the test binary, run again, the game server process
// of TestTokenFromTheAgentsDescriptor instead of running tests.
const tokenChildEnv = "TETHER_SDK_TEST_TOKEN_CHILD"

// tokenReport is what the child process finds, printed as JSON.
type tokenReport struct {
	First, Second  string // two calls of sdk.Token
	Err            string
	FromEnv        string // sdk.FromEnv().Token, after them
	FDVarLeft      bool   // $TETHER_GAMESERVER_TOKEN_FD still set
	DescriptorOpen bool   // fd 3 is still a pipe
}

// TestTokenChild is the child process; it does nothing in a normal run.
func TestTokenChild(t *testing.T) {
	if os.Getenv(tokenChildEnv) == "" {
		t.Skip("the child process of TestTokenFromTheAgentsDescriptor")
	}
	var r tokenReport
	var err error
	r.First, err = sdk.Token()
	if err != nil {
		r.Err = err.Error()
	}
	r.Second, _ = sdk.Token()
	r.FromEnv = sdk.FromEnv().Token
	_, r.FDVarLeft = os.LookupEnv(sdk.EnvTokenFD)
	var st syscall.Stat_t
	r.DescriptorOpen = syscall.Fstat(3, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFIFO
	b, _ := json.Marshal(r)
	fmt.Printf("REPORT %s\n", b)
}

// runTokenChild runs TestTokenChild with env and, as fd 3, the read end of
// a pipe holding piped (no descriptor when piped is nil), and returns its
// report.
func runTokenChild(t *testing.T, env []string, piped []byte) tokenReport {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestTokenChild$", "-test.count=1")
	cmd.Env = append([]string{tokenChildEnv + "=1"}, env...)
	if piped != nil {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(piped); err != nil {
			t.Fatal(err)
		}
		w.Close()
		defer r.Close()
		cmd.ExtraFiles = []*os.File{r}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	_, line, ok := bytes.Cut(out, []byte("REPORT "))
	if !ok {
		t.Fatalf("child printed no report:\n%s", out)
	}
	line, _, _ = bytes.Cut(line, []byte("\n"))
	var rep tokenReport
	if err := json.Unmarshal(line, &rep); err != nil {
		t.Fatalf("child report %q: %v", line, err)
	}
	return rep
}

func TestTokenFromTheAgentsDescriptor(t *testing.T) {
	fd := sdk.EnvTokenFD + "=3"
	tests := []struct {
		name    string
		env     []string
		piped   []byte
		want    string
		wantErr bool
	}{
		{name: "read once from the descriptor, kept for later calls", env: []string{fd}, piped: []byte("tok-piped\n"), want: "tok-piped"},
		{name: "the descriptor wins over the variable", env: []string{fd, sdk.EnvToken + "=tok-env"}, piped: []byte("tok-piped\n"), want: "tok-piped"},
		{name: "an agent of before: the variable", env: []string{sdk.EnvToken + "=tok-env"}, want: "tok-env"},
		{name: "a descriptor not given: the variable", env: []string{fd, sdk.EnvToken + "=tok-env"}, want: "tok-env"},
		{name: "a descriptor not given and no variable", env: []string{fd}, wantErr: true},
		{name: "an empty pipe", env: []string{fd}, piped: []byte{}, wantErr: true},
		{name: "neither", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := runTokenChild(t, tt.env, tt.piped)
			if tt.wantErr != (rep.Err != "") {
				t.Fatalf("error %q, want one: %v", rep.Err, tt.wantErr)
			}
			if rep.First != tt.want || rep.Second != tt.want || rep.FromEnv != tt.want {
				t.Fatalf("tokens %q, %q, FromEnv %q; want %q each time", rep.First, rep.Second, rep.FromEnv, tt.want)
			}
			if tt.piped != nil && !tt.wantErr && (rep.FDVarLeft || rep.DescriptorOpen) {
				t.Fatalf("after reading: $%s still set %v, descriptor still open %v", sdk.EnvTokenFD, rep.FDVarLeft, rep.DescriptorOpen)
			}
		})
	}
}
