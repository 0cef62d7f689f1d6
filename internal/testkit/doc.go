// Package testkit builds the Kubernetes objects tests need, fluently, in the style of
// k8s.io/kubernetes/pkg/scheduler/testing:
//
//	testkit.MakePod().Name("p").Neuron(4).Node("trn1-a").Obj()
//	testkit.MakeNode().Name("trn1-a").InstanceType("trn1.32xlarge").Obj()
//	testkit.MakeClaim().Name("c").Device("neurons", "trn1-a", "neurondevice0").Obj()
//	testkit.MakeClaim().Name("four").Request("neurons", 4).Template()
//
// Defaults are few and explicit:
//   - objects live in DefaultNamespace ("default") until Namespace says otherwise;
//   - Name sets the UID to "uid-"+name (UIDOf) unless UID was given;
//   - annotation and label maps are never nil;
//   - a pod has no node, no phase, no containers and no tolerations until asked.
//
// Every method changes the object in place and returns the wrapper; Obj returns the object
// itself, not a copy, so build a new wrapper for each object.
package testkit

import "k8s.io/apimachinery/pkg/types"

// DefaultNamespace is the namespace of every object until Namespace is called.
const DefaultNamespace = "default"

// DefaultContainer is the container Neuron and NeuronCores add.
const DefaultContainer = "main"

// UIDOf is the UID Name gives an object called name: "uid-" + name.
func UIDOf(name string) types.UID { return types.UID("uid-" + name) }
