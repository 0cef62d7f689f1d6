package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"
)

// Output formats of -o. A command accepts the ones that fit what it prints; docs/kubectl-neuron.md
// has one table per command.
const (
	outTable    = "table"
	outWide     = "wide"
	outJSON     = "json"
	outYAML     = "yaml"
	outName     = "name"
	outJSONPath = "jsonpath" // written jsonpath=TEMPLATE
)

// commandFormats are the -o formats of each command; docs/kubectl-neuron.md documents them in
// one table per command (TestDocumentedOutputFormats).
var commandFormats = map[string][]string{
	"catalog":  {outTable, outJSON, outYAML, outJSONPath},
	"plan":     {outTable, outJSON, outYAML, outJSONPath},
	"topology": {outTable, outJSON, outYAML, outJSONPath},
	"simulate": {outTable, outJSON, outYAML, outJSONPath},
	"check":    {outTable, outJSON, outYAML, outJSONPath},
	"nodes":    {outTable, outWide, outJSON, outYAML, outName, outJSONPath},
	"cleanup":  {outTable, outJSON, outYAML, outName, outJSONPath},
	"explain":  {outTable, outJSON, outYAML, outJSONPath},
	"top":      {outTable, outJSON, outYAML, outJSONPath},
}

// outputFormat is a parsed -o value.
type outputFormat struct {
	name     string // one of the out* constants
	template string // the jsonpath template
	jp       *jsonpath.JSONPath
}

// parseOutput reads -o for a command that accepts the formats allowed (outJSONPath admits
// jsonpath=TEMPLATE, as kubectl writes it; kubectl's -o=jsonpath='{...}' arrives without quotes).
func parseOutput(s string, allowed ...string) (outputFormat, error) {
	usage := func() error {
		shown := slices.Clone(allowed)
		for i, a := range shown {
			if a == outJSONPath {
				shown[i] = "jsonpath=TEMPLATE"
			}
		}
		return usageErr("output format %q is not supported: use one of %v", s, shown)
	}
	name, template, isTemplate := strings.Cut(s, "=")
	if !slices.Contains(allowed, name) || isTemplate != (name == outJSONPath) {
		if name == outJSONPath && slices.Contains(allowed, outJSONPath) {
			return outputFormat{}, usageErr("-o jsonpath needs a template: write -o jsonpath='{.name}' (see https://kubernetes.io/docs/reference/kubectl/jsonpath/)")
		}
		return outputFormat{}, usage()
	}
	f := outputFormat{name: name, template: template}
	if name == outJSONPath {
		if strings.TrimSpace(template) == "" {
			return outputFormat{}, usageErr("-o jsonpath= has an empty template: write -o jsonpath='{.name}'")
		}
		jp := jsonpath.New("output")
		jp.AllowMissingKeys(true) // as kubectl's --allow-missing-template-keys defaults to
		if err := jp.Parse(template); err != nil {
			return outputFormat{}, usageErr("-o jsonpath=%s: %v (see https://kubernetes.io/docs/reference/kubectl/jsonpath/)", template, err)
		}
		f.jp = jp
	}
	return f, nil
}

// data reports whether the format prints the command's data document (json, yaml, jsonpath)
// rather than its own table or names.
func (f outputFormat) data() bool {
	return f.name == outJSON || f.name == outYAML || f.name == outJSONPath
}

// writeData writes v as JSON (indented, or on one line with oneLine), YAML or through the
// jsonpath template. The template sees the document -o json prints.
func writeData(w io.Writer, f outputFormat, v any, oneLine bool) error {
	switch f.name {
	case outJSON:
		if oneLine {
			return writeJSONLine(w, v)
		}
		return writeJSON(w, v)
	case outYAML:
		data, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	case outJSONPath:
		raw, err := json.Marshal(v)
		if err != nil {
			return err
		}
		var doc any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			return err
		}
		var buf bytes.Buffer
		if err := f.jp.Execute(&buf, doc); err != nil {
			return usageErr("-o jsonpath=%s: %v", f.template, err)
		}
		_, err = w.Write(buf.Bytes())
		return err
	}
	return fmt.Errorf("internal error: output format %q has no data document", f.name)
}
