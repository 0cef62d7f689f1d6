package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ldflags are the linker flags of every binary: no symbol table, no DWARF, no build id. The
// product has no version variable to set; the version is the image's label and tag.
const ldflags = "-s -w -buildid="

// component is one image: a binary (./cmd/<name> of the product module unless module, pkg or
// prebuilt says otherwise) and the user it runs as.
type component struct {
	name string
	user string
	// module is the directory of the Go module that holds pkg, relative to the repository;
	// default "" the product module. neuron-kube-scheduler builds from scheduler/, a module of
	// its own (it imports k8s.io/kubernetes, which the product module never does).
	module string
	// pkg is the package to build, relative to the module; default ./cmd/<name>.
	pkg string
	// kubeVersion: the binary is a kube-scheduler; its version (k8s.io/component-base/version,
	// client-go's) is set to the k8s.io/kubernetes version its module requires, as
	// hack/build-scheduler.sh sets it. complete fills versionFlags from it.
	kubeVersion  bool
	versionFlags string
	// prebuilt names a binary that is built elsewhere (the pinned kube-scheduler, CoreDNS): the
	// image packs that file for the build platform only.
	prebuilt bool
	// entrypoint is the binary's path in the image; default /<name>.
	entrypoint string
	// aliases are more paths of the binary in the image (hard links).
	aliases []string
	// ref is the image's reference without the tag; default docker.io/library/<name>.
	ref string
	// tag is the image's tag; default the chart's appVersion.
	tag string
}

func (c component) pkgPath() string {
	if c.pkg != "" {
		return c.pkg
	}
	return "./cmd/" + c.name
}

// ldflags are the component's linker flags: the fixed ones, then its version flags.
func (c component) ldflags() string {
	if c.versionFlags == "" {
		return ldflags
	}
	return ldflags + " " + c.versionFlags
}

// buildCommand is how the binary is built, for the image's history.
func (c component) buildCommand(p v1.Platform) string {
	cmd := fmt.Sprintf("CGO_ENABLED=0 GOOS=%s GOARCH=%s go build -trimpath -buildvcs=false -ldflags='%s' %s", p.OS, p.Architecture, c.ldflags(), c.pkgPath())
	if c.module != "" {
		cmd = "cd " + c.module + " && " + cmd
	}
	return cmd
}

var kubernetesRequireRE = regexp.MustCompile(`(?m)^\s*(?:require\s+)?k8s\.io/kubernetes\s+(v\S+)`)

// resolveVersionFlags sets versionFlags of a kubeVersion component from its module's go.mod.
func (c *component) resolveVersionFlags(repo string) error {
	if !c.kubeVersion {
		return nil
	}
	gomod := filepath.Join(repo, c.module, "go.mod")
	data, err := os.ReadFile(gomod)
	if err != nil {
		return fmt.Errorf("%s: %w", c.name, err)
	}
	m := kubernetesRequireRE.FindSubmatch(data)
	if m == nil {
		return fmt.Errorf("%s: %s requires no k8s.io/kubernetes", c.name, gomod)
	}
	version := string(m[1])
	major, minor, ok := kubeMajorMinor(version)
	if !ok {
		return fmt.Errorf("%s: k8s.io/kubernetes %s in %s is not vMAJOR.MINOR.PATCH", c.name, version, gomod)
	}
	var flags []string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		flags = append(flags, "-X "+pkg+".gitVersion="+version, "-X "+pkg+".gitMajor="+major, "-X "+pkg+".gitMinor="+minor, "-X "+pkg+".gitTreeState=clean")
	}
	c.versionFlags = strings.Join(flags, " ")
	return nil
}

func kubeMajorMinor(v string) (major, minor string, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) != 3 || !strings.HasPrefix(v, "v") {
		return "", "", false
	}
	for _, p := range parts[:2] {
		if _, err := strconv.Atoi(p); err != nil {
			return "", "", false
		}
	}
	return parts[0], parts[1], true
}

func (c component) entry() string {
	if c.entrypoint != "" {
		return c.entrypoint
	}
	return "/" + c.name
}

func (c component) reference(version string) (ref, tag string) {
	ref, tag = c.ref, c.tag
	if ref == "" {
		ref = "docker.io/library/" + c.name
	}
	if tag == "" {
		tag = version
	}
	return ref, tag
}

// components are the images `make images` builds. The device plugin and the DRA driver run as
// root: they serve unix sockets in the kubelet's root-owned hostPath directories
// (device-plugins/, plugins_registry/, plugins/) and read sysfs files that only root can read;
// the chart runs them as root (the DRA driver privileged) too. The extender and the autoscaler
// only talk to the API server (and EC2) over the network, as nonroot.
var components = []component{
	{name: "neuron-device-plugin", user: rootUser},
	{name: "neuron-scheduler-extender", user: nonrootUser},
	{name: "neuron-dra-driver", user: rootUser},
	{name: "neuron-autoscaler", user: nonrootUser},
	// kube-scheduler with the NeuronTopology plugin: as kube-scheduler's own image, nonroot.
	{name: "neuron-kube-scheduler", user: nonrootUser, module: "scheduler", kubeVersion: true},
}

// labComponents are the images real lab nodes run besides the components (docs/lab.md): the
// pod sandbox, the stand-in for every image the lab does not have, and the pinned kube-scheduler
// (my-scheduler) and CoreDNS, packed from the binaries hack/build-tools.sh and
// hack/node/build.sh build. `go run . -lab` builds them.
var labComponents = []component{
	{name: "pause", user: "65535:65535", pkg: "./test/images/pause", ref: "docker.io/kube-neuron-lab/pause"},
	{name: "stand-in", user: rootUser, pkg: "./test/images/stand-in", ref: "docker.io/kube-neuron-lab/stand-in",
		aliases: []string{"/bin/sh", "/bin/bash", "/usr/bin/env", "/bin/sleep", "/bin/ls", "/usr/bin/python3", "/usr/local/bin/python3"}},
	{name: "kube-scheduler", user: nonrootUser, prebuilt: true, entrypoint: "/usr/local/bin/kube-scheduler", ref: "registry.k8s.io/kube-scheduler"},
	{name: "coredns", user: rootUser, prebuilt: true, entrypoint: "/coredns", ref: "registry.k8s.io/coredns/coredns"},
}

// goBuild builds the components' packages for platform p into dir, each binary named after its
// component, with the flags that make the binaries reproducible: one go build for each module
// and set of linker flags. env is added to the environment last, so it wins (the tests set
// GOCACHE with it).
func goBuild(ctx context.Context, repo, dir string, p v1.Platform, cs []component, env []string, log io.Writer) error {
	type group struct {
		module, ldflags string
		names, pkgs     []string
	}
	var groups []*group
	for _, c := range cs {
		if c.prebuilt {
			continue
		}
		i := slices.IndexFunc(groups, func(g *group) bool { return g.module == c.module && g.ldflags == c.ldflags() })
		if i < 0 {
			groups = append(groups, &group{module: c.module, ldflags: c.ldflags()})
			i = len(groups) - 1
		}
		groups[i].names = append(groups[i].names, c.name)
		groups[i].pkgs = append(groups[i].pkgs, c.pkgPath())
	}
	for _, g := range groups {
		if err := goBuildModule(ctx, filepath.Join(repo, g.module), dir, g.ldflags, p, g.names, g.pkgs, env, log); err != nil {
			return err
		}
	}
	return nil
}

// goBuildModule builds packages of the module in moduleDir into dir.
func goBuildModule(ctx context.Context, moduleDir, dir, flags string, p v1.Platform, names, pkgs, env []string, log io.Writer) error {
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=" + flags, "-o", dir + string(filepath.Separator)}
	args = append(args, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(),
		"CGO_ENABLED=0",
		"GOOS="+p.OS,
		"GOARCH="+p.Architecture,
		// The defaults, so that a GOAMD64 or GOARM64 of the caller's environment changes nothing.
		"GOAMD64=v1",
		"GOARM64=v8.0",
		// Nothing from the caller's GOFLAGS (-race, -cover, -buildvcs=...).
		"GOFLAGS=-mod=readonly",
	)
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stdout = log
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s in %s (GOOS=%s GOARCH=%s): %w\n%s", strings.Join(args, " "), moduleDir, p.OS, p.Architecture, err, stderr.String())
	}
	fmt.Fprintf(log, "built %s for %s/%s in %s\n", strings.Join(names, " "), p.OS, p.Architecture, time.Since(start).Round(100*time.Millisecond))
	return nil
}

var appVersionRE = regexp.MustCompile(`(?m)^appVersion:\s*"?([^"\s]+)"?\s*$`)

// chartAppVersion reads appVersion from the chart: the tag the chart uses by default.
func chartAppVersion(repo string) (string, error) {
	p := filepath.Join(repo, "deployments", "helm", "kube-neuron", "Chart.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	m := appVersionRE.FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("%s has no appVersion", p)
	}
	return string(m[1]), nil
}

// sourceDateEpoch is $SOURCE_DATE_EPOCH, else the time of the last commit, else 0.
func sourceDateEpoch(repo string) (time.Time, error) {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds: %w", s, err)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	out, err := exec.Command("git", "-C", repo, "log", "-1", "--format=%ct").Output()
	if err != nil {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return time.Unix(0, 0).UTC(), nil
	}
	return time.Unix(n, 0).UTC(), nil
}

// gitRevision is the commit of repo's HEAD, or "" outside a git checkout.
func gitRevision(repo string) string {
	out, err := exec.Command("git", "-C", repo, "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
