// Package nodemetrics is what the node agents (device plugin and DRA driver) export about their
// Neuron devices: the Neuron driver's usage counters (neuron.Stats) joined with who holds each
// device and core, the devices' health, and the engine's free blocks.
//
// The core is pure: series turns a Snapshot (and the utilisation a Sampler computed) into the
// series of docs/metrics.md. The agent drives the Sampler from its own loop, so scrapes never
// change what utilisation reports; NewCollector wraps both for a prometheus.Registry.
package nodemetrics
