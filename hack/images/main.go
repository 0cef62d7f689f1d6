// Command images builds the container images of kube-neuron's components without a container
// engine, the way ko does: each binary is built by `go build` (CGO_ENABLED=0, -trimpath, fixed
// ldflags) for every platform and laid as one layer on a scratch-like base that this program
// writes itself (/etc/passwd and /etc/group with root and nonroot 65532, /tmp). Each component
// becomes one OCI image index with an image per platform, written as an OCI image layout in a
// tarball, <out>/<component>.tar, which `skopeo copy --all oci-archive:...` pushes (docs/images.md).
//
// Every timestamp (image created, history, file mtimes) is SOURCE_DATE_EPOCH, by default the
// time of the last commit, and every tarball is sorted: the same sources and Go toolchain give
// the same digests.
//
// Usage, from hack/images: go run . [-repo ../..] [-out DIR] [-platforms linux/amd64,linux/arm64] [-version V] [component ...]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// options of one run; see main for the flags.
type options struct {
	repo       string // the product module
	out        string // where <component>.tar are written
	platforms  []v1.Platform
	components []component
	version    string // tag and org.opencontainers.image.version
	revision   string // org.opencontainers.image.revision; empty leaves the label out
	created    time.Time
	env        []string // added to go build's environment
	log        io.Writer
	// prebuilt are the binaries of prebuilt components, by name.
	prebuilt map[string]string
}

// result is what one component's archive holds.
type result struct {
	name   string
	ref    string // name:tag as a pod names it
	path   string
	size   int64   // of the archive
	digest v1.Hash // of the image index
	images []platformImage
}

type platformImage struct {
	platform string
	digest   v1.Hash // of the image manifest
	size     int64   // manifest, config and compressed layers
}

func main() {
	var o options
	var platforms string
	var lab bool
	var prebuilt []string
	flag.StringVar(&o.repo, "repo", "../..", "the kube-neuron checkout (the product module)")
	flag.StringVar(&o.out, "out", "", "output directory (default <repo>/bin/images)")
	flag.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated os/arch list")
	flag.StringVar(&o.version, "version", "", "the image version: the tag in the archive and the label org.opencontainers.image.version (default the chart's appVersion)")
	flag.BoolVar(&lab, "lab", false, "build the images of real lab nodes instead ("+strings.Join(componentNames(labComponents), ", ")+"; docs/lab.md), for the build platform")
	flag.Func("prebuilt", "with -lab: `name=path@tag`, the binary and tag of a prebuilt image (kube-scheduler, coredns); repeatable", func(v string) error {
		prebuilt = append(prebuilt, v)
		return nil
	})
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: go run . [flags] [component ...]\n\nBuilds the images of the components (default all: %s).\n\n", strings.Join(componentNames(components), " "))
		flag.PrintDefaults()
	}
	flag.Parse()
	if lab {
		o.components = labComponents
	}
	if err := o.setPrebuilt(prebuilt); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(2)
	}
	if err := o.complete(platforms, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	results, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
	printResults(os.Stdout, o, results)
	fmt.Printf("%d images in %s (SOURCE_DATE_EPOCH=%d)\n", len(results), time.Since(start).Round(100*time.Millisecond), o.created.Unix())
}

// complete fills the defaults: the chart's appVersion, the commit time, bin/images.
func (o *options) complete(platforms string, names []string) error {
	repo, err := filepath.Abs(o.repo)
	if err != nil {
		return err
	}
	o.repo = repo
	if o.out == "" {
		o.out = filepath.Join(repo, "bin", "images")
	}
	if o.out, err = filepath.Abs(o.out); err != nil {
		return err
	}
	for p := range strings.SplitSeq(platforms, ",") {
		pl, err := v1.ParsePlatform(strings.TrimSpace(p))
		if err != nil || pl.OS == "" || pl.Architecture == "" {
			return fmt.Errorf("-platforms: %q is not os/arch, e.g. linux/arm64", p)
		}
		o.platforms = append(o.platforms, *pl)
	}
	all := o.components
	if all == nil {
		all = components
	}
	o.components = all
	if len(names) > 0 {
		o.components = nil
		for _, n := range names {
			i := slices.IndexFunc(all, func(c component) bool { return c.name == n })
			if i < 0 {
				return fmt.Errorf("unknown component %q; the components are %s", n, strings.Join(componentNames(all), ", "))
			}
			o.components = append(o.components, all[i])
		}
	}
	o.components = slices.Clone(o.components)
	for i := range o.components {
		if err := o.components[i].resolveVersionFlags(repo); err != nil {
			return err
		}
	}
	for _, c := range o.components {
		if !c.prebuilt {
			continue
		}
		if _, ok := o.prebuilt[c.name]; !ok {
			return fmt.Errorf("%s is prebuilt: give its binary with -prebuilt %s=PATH@TAG", c.name, c.name)
		}
		host := v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}
		if len(o.platforms) != 1 || o.platforms[0].OS != host.OS || o.platforms[0].Architecture != host.Architecture {
			return fmt.Errorf("%s is a prebuilt binary for %s: use -platforms %s", c.name, host, host)
		}
	}
	if o.version == "" {
		if o.version, err = chartAppVersion(repo); err != nil {
			return err
		}
	}
	if o.created, err = sourceDateEpoch(repo); err != nil {
		return err
	}
	o.revision = gitRevision(repo)
	o.log = os.Stderr
	return nil
}

// setPrebuilt reads -prebuilt name=path@tag values into o.prebuilt and the tags of the lab
// components.
func (o *options) setPrebuilt(values []string) error {
	o.prebuilt = map[string]string{}
	for _, v := range values {
		name, rest, ok := strings.Cut(v, "=")
		path, tag, ok2 := strings.Cut(rest, "@")
		if !ok || !ok2 || name == "" || path == "" || tag == "" {
			return fmt.Errorf("-prebuilt %q: want name=path@tag", v)
		}
		i := slices.IndexFunc(o.components, func(c component) bool { return c.name == name && c.prebuilt })
		if i < 0 {
			return fmt.Errorf("-prebuilt %q: %s is not a prebuilt component (use -lab)", v, name)
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return err
		}
		o.prebuilt[name] = abs
		o.components = slices.Clone(o.components)
		o.components[i].tag = tag
	}
	return nil
}

func componentNames(cs []component) []string {
	var names []string
	for _, c := range cs {
		names = append(names, c.name)
	}
	return names
}

// run builds the binaries of every platform, then writes one archive per component.
func run(ctx context.Context, o options) ([]result, error) {
	tmp, err := os.MkdirTemp("", "kube-neuron-images-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	dirs := map[string]string{}
	for _, p := range o.platforms {
		dir := filepath.Join(tmp, p.OS+"_"+p.Architecture+p.Variant)
		if err := goBuild(ctx, o.repo, dir, p, o.components, o.env, o.log); err != nil {
			return nil, err
		}
		dirs[p.String()] = dir
	}
	return assemble(o, dirs)
}

// assemble writes the archive of every component from the binaries in dirs, one directory per
// platform (keyed by v1.Platform.String) with a file per component.
func assemble(o options, dirs map[string]string) ([]result, error) {
	base, err := layer(baseFiles(), o.created)
	if err != nil {
		return nil, fmt.Errorf("base layer: %w", err)
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return nil, err
	}
	// Compressing the binaries takes most of the time: one component per CPU.
	results := make([]result, len(o.components))
	errs := make([]error, len(o.components))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, c := range o.components {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i], errs[i] = writeComponent(o, c, base, dirs)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%s: %w", c.name, errs[i])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return results, nil
}

func writeComponent(o options, c component, base v1.Layer, dirs map[string]string) (result, error) {
	ref, tag := c.reference(o.version)
	labels := map[string]string{
		"org.opencontainers.image.title":    c.name,
		"org.opencontainers.image.version":  tag,
		"org.opencontainers.image.source":   "https://github.com/kube-neuron/kube-neuron",
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	if o.revision != "" {
		labels["org.opencontainers.image.revision"] = o.revision
	}
	var imgs []v1.Image
	for _, p := range o.platforms {
		binPath := filepath.Join(dirs[p.String()], c.name)
		if c.prebuilt {
			binPath = o.prebuilt[c.name]
		}
		bin, err := os.ReadFile(binPath)
		if err != nil {
			return result{}, err
		}
		createdBy := c.buildCommand(p)
		if c.prebuilt {
			createdBy = "a prebuilt " + c.name + " binary (hack/build-tools.sh, hack/node/build.sh)"
		}
		img, err := image(base, imageSpec{name: c.name, entrypoint: c.entry(), aliases: c.aliases, createdBy: createdBy, user: c.user, platform: p, binary: bin, labels: labels, created: o.created})
		if err != nil {
			return result{}, fmt.Errorf("%s image: %w", p, err)
		}
		imgs = append(imgs, img)
	}
	idx, err := index(imgs)
	if err != nil {
		return result{}, err
	}

	r := result{name: c.name, ref: strings.TrimPrefix(ref, "docker.io/library/") + ":" + tag, path: filepath.Join(o.out, c.name+".tar")}
	tmp, err := os.CreateTemp(o.out, c.name+".tar.tmp*")
	if err != nil {
		return result{}, err
	}
	defer os.Remove(tmp.Name())
	annotations := map[string]string{
		// skopeo's oci-archive:<file>:<tag>, and what containerd (ctr import, kind load
		// image-archive) names the image: the chart's default reference <name>:<appVersion>.
		"org.opencontainers.image.ref.name": tag,
		"io.containerd.image.name":          ref + ":" + tag,
	}
	if err := writeArchive(tmp, idx, annotations, o.created); err != nil {
		tmp.Close()
		return result{}, err
	}
	if err := tmp.Close(); err != nil {
		return result{}, err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return result{}, err
	}
	if err := os.Rename(tmp.Name(), r.path); err != nil {
		return result{}, err
	}
	st, err := os.Stat(r.path)
	if err != nil {
		return result{}, err
	}
	r.size = st.Size()
	if r.digest, err = idx.Digest(); err != nil {
		return result{}, err
	}
	for i, img := range imgs {
		pi := platformImage{platform: o.platforms[i].String()}
		if pi.digest, err = img.Digest(); err != nil {
			return result{}, err
		}
		if pi.size, err = imageSize(img); err != nil {
			return result{}, err
		}
		r.images = append(r.images, pi)
	}
	return r, nil
}

// imageSize is what a registry stores for img: manifest, config and compressed layers.
func imageSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	n := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}

func printResults(w io.Writer, o options, results []result) {
	for _, r := range results {
		path := r.path
		if rel, err := filepath.Rel(o.repo, path); err == nil && !strings.HasPrefix(rel, "..") {
			path = rel
		}
		fmt.Fprintf(w, "%s  %s@%s  %s\n", path, r.ref, r.digest, mib(r.size))
		for _, i := range r.images {
			fmt.Fprintf(w, "  %-12s %s  %s\n", i.platform, i.digest, mib(i.size))
		}
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
