package deviceplugin

import (
	"context"
	"errors"
	"os"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kube-neuron/kube-neuron/internal/deviceplugin/ledger"
)

// kubeletPodResources lists what the kubelet holds for each container, one ContainerDevices per
// resource with every id of it (mergeContainerDevices).
func (p *Plugin) kubeletPodResources(ctx context.Context) ([]*podresv1.PodResources, error) {
	list := p.listPodResources
	if p.podResources != nil {
		list = p.podResources
	}
	prs, err := list(ctx)
	if err != nil {
		return nil, err
	}
	return mergeContainerDevices(prs), nil
}

func (p *Plugin) listPodResources(ctx context.Context) ([]*podresv1.PodResources, error) {
	if p.o.PodResourcesSocket == "" {
		return nil, errors.New("no PodResources socket configured")
	}
	if _, err := os.Stat(p.o.PodResourcesSocket); err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+p.o.PodResourcesSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	rpcCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := podresv1.NewPodResourcesListerClient(conn).List(rpcCtx, &podresv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, err
	}
	return resp.PodResources, nil
}

// mergeContainerDevices returns prs with the device ids of each container merged into one
// ContainerDevices per resource, ids ascending, resources in the order they first appear. The
// kubelet lists a container's ids as one entry per id (with the id's NUMA node, if any); the
// plugin reasons about what a container holds of a resource as a whole.
func mergeContainerDevices(prs []*podresv1.PodResources) []*podresv1.PodResources {
	out := make([]*podresv1.PodResources, 0, len(prs))
	for _, pr := range prs {
		if pr == nil {
			continue
		}
		npr := &podresv1.PodResources{Name: pr.Name, Namespace: pr.Namespace}
		for _, c := range pr.Containers {
			if c != nil {
				npr.Containers = append(npr.Containers, mergeContainer(c))
			}
		}
		out = append(out, npr)
	}
	return out
}

func mergeContainer(c *podresv1.ContainerResources) *podresv1.ContainerResources {
	nc := &podresv1.ContainerResources{Name: c.Name}
	byRes := map[string]*podresv1.ContainerDevices{}
	for _, d := range c.Devices {
		if d == nil {
			continue
		}
		m := byRes[d.ResourceName]
		if m == nil {
			m = &podresv1.ContainerDevices{ResourceName: d.ResourceName}
			byRes[d.ResourceName] = m
			nc.Devices = append(nc.Devices, m)
		}
		for _, id := range d.DeviceIds {
			if !slices.Contains(m.DeviceIds, id) {
				m.DeviceIds = append(m.DeviceIds, id)
			}
		}
	}
	for _, m := range nc.Devices {
		ledger.SortIDs(m.DeviceIds)
	}
	return nc
}

// admittedOf is what merged PodResources show, one entry per container and resource.
func admittedOf(prs []*podresv1.PodResources) []ledger.Admitted {
	var out []ledger.Admitted
	for _, pr := range prs {
		for _, c := range pr.Containers {
			for _, d := range c.Devices {
				out = append(out, ledger.Admitted{Pod: ledger.PodKey{Namespace: pr.Namespace, Name: pr.Name}, Container: c.Name, Resource: d.ResourceName, IDs: d.DeviceIds})
			}
		}
	}
	return out
}
