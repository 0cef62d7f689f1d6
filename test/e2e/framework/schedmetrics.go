package framework

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// ScrapeSchedulerMetrics reads the /metrics of the scheduler the lab started as name
// (lab.CustomSchedulerName for my-scheduler) on its secure port, with the lab's admin client
// certificate (the scheduler authorizes it; its own serving certificate is self-signed on
// loopback and not verified), and returns the series by name.
func ScrapeSchedulerMetrics(ctx context.Context, name string) (map[string][]Sample, error) {
	cp := L.ControlPlane()
	url, ok := cp.SchedulerURL(name)
	if !ok {
		return nil, fmt.Errorf("the lab has not started a scheduler called %s", name)
	}
	cfg := cp.RESTConfig()
	cfg.Host, cfg.NegotiatedSerializer = url, scheme.Codecs.WithoutConversion()
	cfg.TLSClientConfig = rest.TLSClientConfig{Insecure: true, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, CertData: cfg.CertData, KeyData: cfg.KeyData}
	client, err := rest.UnversionedRESTClientFor(cfg)
	if err != nil {
		return nil, err
	}
	raw, err := client.Get().AbsPath("/metrics").Timeout(30 * time.Second).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("GET %s/metrics: %w", url, err)
	}
	out, err := parseSamples(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parsing %s/metrics: %w", url, err)
	}
	return out, nil
}
