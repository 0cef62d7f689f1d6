// Package flagenv gives command-line flags defaults from environment variables, so that every
// flag of a component can also be set the way a Helm chart sets it (env in the pod spec).
package flagenv

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// Bind sets, for each flag name -> env var, the flag's value from the variable when the variable
// is set and the flag was not given on the command line, and notes the variable in the usage.
// Call it after parsing.
func Bind(fs *pflag.FlagSet, env map[string]string) error {
	for name, variable := range env {
		f := fs.Lookup(name)
		if f == nil {
			return fmt.Errorf("no flag --%s to bind to $%s", name, variable)
		}
		if f.Changed {
			continue
		}
		if v, ok := os.LookupEnv(variable); ok {
			if err := fs.Set(name, v); err != nil {
				return fmt.Errorf("$%s=%q: %w", variable, v, err)
			}
		}
	}
	return nil
}

// Annotate appends "(env VAR)" to the usage of each bound flag; call it before parsing.
func Annotate(fs *pflag.FlagSet, env map[string]string) {
	for name, variable := range env {
		if f := fs.Lookup(name); f != nil && !strings.Contains(f.Usage, "$"+variable) {
			f.Usage += " (env $" + variable + ")"
		}
	}
}
