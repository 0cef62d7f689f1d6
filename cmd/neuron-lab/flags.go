package main

import (
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/kube-neuron/kube-neuron/internal/lab"
)

// realFlags are the flags of real nodes, of the chart's installation and of the LeaderWorkerSet
// controller.
type realFlags struct {
	nodeBin, images, labImages, chart, helm, lws string
	values                                       []string
}

func (r *realFlags) add(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&r.nodeBin, "node-bin-dir", "", "containerd, runc and the CNI plugins of real nodes (hack/node/build.sh prints it)")
	f.StringVar(&r.images, "images-dir", "", "the components' image archives for real nodes (make images PLATFORMS=linux/amd64; hack/lab-images.sh)")
	f.StringVar(&r.labImages, "lab-images-dir", "", "the image archives of real nodes: pause, stand-in, kube-scheduler, coredns (hack/lab-images.sh)")
	f.StringVar(&r.chart, "chart", "", "install this Helm chart with helm upgrade --install once the nodes run")
	f.StringVar(&r.helm, "helm", "", "the helm binary for --chart (hack/helm/build.sh prints it)")
	f.StringArrayVarP(&r.values, "values", "f", nil, "a values file for --chart, after the lab's own (repeatable)")
	f.StringVar(&r.lws, "lws-dir", "", "run the LeaderWorkerSet controller and its webhooks from this directory (hack/lws/build.sh or make lws prints it); not with real nodes")
}

// abs makes every path absolute (`up` runs the lab in the background).
func (r *realFlags) abs() error {
	for _, p := range []*string{&r.nodeBin, &r.images, &r.labImages, &r.chart, &r.helm, &r.lws} {
		if *p == "" {
			continue
		}
		a, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = a
	}
	for i, v := range r.values {
		a, err := filepath.Abs(v)
		if err != nil {
			return err
		}
		r.values[i] = a
	}
	return nil
}

// args passes the flags on to `neuron-lab serve`.
func (r *realFlags) args() []string {
	var out []string
	for _, f := range []struct{ name, v string }{{"--node-bin-dir", r.nodeBin}, {"--images-dir", r.images},
		{"--lab-images-dir", r.labImages}, {"--chart", r.chart}, {"--helm", r.helm}, {"--lws-dir", r.lws}} {
		if f.v != "" {
			out = append(out, f.name, f.v)
		}
	}
	for _, v := range r.values {
		out = append(out, "--values", v)
	}
	return out
}

func (r *realFlags) apply(o *lab.Options) {
	o.NodeBinDir, o.ImagesDir, o.LabImagesDir = r.nodeBin, r.images, r.labImages
	if r.lws != "" {
		o.LWS, o.LWSDir = true, r.lws
	}
	if r.chart != "" {
		o.Chart = &lab.ChartOptions{Helm: r.helm, Chart: r.chart, ValuesFiles: r.values, Wait: 4 * time.Minute}
	}
}
