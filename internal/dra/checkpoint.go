package dra

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// CheckpointVersion is the version of the checkpoint file this driver writes and reads.
const CheckpointVersion = "neuron.aws.com/checkpoint/v1"

// CheckpointFile is the checkpoint's name in the plugin's data directory.
const CheckpointFile = "checkpoint.json"

// Checkpoint is what the driver keeps on disk so that NodePrepareResources and
// NodeUnprepareResources stay idempotent across retries and restarts: every claim it prepared,
// by claim UID, and what preparing it gave.
type Checkpoint struct {
	Version string                    `json:"version"`
	Claims  map[string]*PreparedClaim `json:"claims"`
}

// PreparedClaim is one prepared claim: its plan and the CDI spec written for it.
type PreparedClaim struct {
	Plan
	// CDISpec is the name of the claim's CDI spec file in the CDI directory.
	CDISpec string `json:"cdiSpec"`
	// CDIDevices are the CDI device ids per planned device (same order as Plan.Devices).
	CDIDevices [][]string `json:"cdiDevices"`
}

// NewCheckpoint returns an empty checkpoint.
func NewCheckpoint() *Checkpoint {
	return &Checkpoint{Version: CheckpointVersion, Claims: map[string]*PreparedClaim{}}
}

// DecodeCheckpoint reads a checkpoint strictly: unknown fields, another version, trailing data or
// an inconsistent claim are errors.
func DecodeCheckpoint(data []byte) (*Checkpoint, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Checkpoint
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("decoding: trailing data after the checkpoint")
	}
	if c.Version != CheckpointVersion {
		return nil, fmt.Errorf("version %q is not %q, the one this driver reads", c.Version, CheckpointVersion)
	}
	if c.Claims == nil {
		c.Claims = map[string]*PreparedClaim{}
	}
	for uid, pc := range c.Claims {
		if pc == nil {
			return nil, fmt.Errorf("claim %s: empty entry", uid)
		}
		if len(pc.CDIDevices) != len(pc.Devices) {
			return nil, fmt.Errorf("claim %s: %d devices but %d CDI device lists", uid, len(pc.Devices), len(pc.CDIDevices))
		}
		for _, d := range pc.Devices {
			if len(d.Indexes) == 0 || slices.ContainsFunc(d.Indexes, func(i int) bool { return i < 0 }) {
				return nil, fmt.Errorf("claim %s: device %s has invalid Neuron device indexes %v", uid, d.Device, d.Indexes)
			}
		}
	}
	return &c, nil
}

// LoadCheckpoint reads the checkpoint in dir; a missing file is an empty checkpoint.
func LoadCheckpoint(dir string) (*Checkpoint, error) {
	path := filepath.Join(dir, CheckpointFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return NewCheckpoint(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the checkpoint: %w", err)
	}
	c, err := DecodeCheckpoint(data)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s is unreadable (%w): the claims prepared on this node are unknown, so the driver neither starts nor prepares rather than risk giving a device twice. Drain the node's DRA pods, move the file aside and restart the driver", path, err)
	}
	return c, nil
}

// Save writes the checkpoint atomically (a temporary file renamed over the old one, synced).
func (c *Checkpoint) Save(dir string) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("writing the checkpoint: %w", err)
	}
	tmp, err := os.CreateTemp(dir, CheckpointFile+".*.tmp")
	if err != nil {
		return fmt.Errorf("writing the checkpoint: %w", err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing the checkpoint: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing the checkpoint: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the checkpoint: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, CheckpointFile)); err != nil {
		return fmt.Errorf("writing the checkpoint: %w", err)
	}
	return nil
}

// Holder returns the prepared claim other than uid that holds any of the Neuron devices, and
// the first device it holds; "" when none does.
func (c *Checkpoint) Holder(uid string, devices []int) (string, int) {
	keys := make([]string, 0, len(c.Claims))
	for k := range c.Claims {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, other := range keys {
		if other == uid {
			continue
		}
		held := c.Claims[other].Indexes()
		for _, d := range devices {
			if _, found := slices.BinarySearch(held, d); found {
				return other, d
			}
		}
	}
	return "", 0
}
