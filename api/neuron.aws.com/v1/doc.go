// Package v1 holds the opaque configuration types a ResourceClaim passes to the DRA driver
// neuron.aws.com in spec.devices.config[].opaque.parameters (DESIGN section 4):
//
//   - NeuronConfig sets the logical NeuronCore size (LNC, 1 or 2) of the devices of the requests
//     it applies to. Whether the node's instance type lets LNC be configured is checked by the
//     driver on the node (trn1 does not: prepare fails there), not by Validate.
//   - UltraServerConfig declares how many nodes of a trn2u UltraServer the workload spans
//     (ultraserverMode 1, 2 or 4).
//
// apiVersion neuron.aws.com/v1 is current; neuron.aws.com/v1alphav1 and
// resource.neuron.aws.com/v1alphav1, which the published beta examples use, decode to the same
// types. Decode reads the JSON the API server stores, strictly, and validates the result; its
// errors name the field, the kind and what is allowed.
//
// A NeuronConfig in a ResourceClaimTemplate (resource.k8s.io/v1):
//
//	apiVersion: resource.k8s.io/v1
//	kind: ResourceClaimTemplate
//	metadata:
//	  name: all-neurons-lnc-1
//	spec:
//	  spec:
//	    devices:
//	      requests:
//	      - name: neurons
//	        exactly:
//	          deviceClassName: neuron.aws.com
//	          allocationMode: All
//	          selectors:
//	          - cel:
//	              expression: "device.attributes['neuron.aws.com'].instanceType == 'trn2.48xlarge'"
//	      config:
//	      - requests: ["neurons"]
//	        opaque:
//	          driver: neuron.aws.com
//	          parameters:
//	            apiVersion: neuron.aws.com/v1
//	            kind: NeuronConfig
//	            logicalNeuronCore: 1
//
// An UltraServerConfig asking for one node of an UltraServer used in 4-node mode:
//
//	apiVersion: resource.k8s.io/v1
//	kind: ResourceClaimTemplate
//	metadata:
//	  name: us-4-node-config
//	spec:
//	  spec:
//	    devices:
//	      requests:
//	      - name: neurons
//	        exactly:
//	          deviceClassName: neuron.aws.com
//	          allocationMode: ExactCount
//	          count: 1
//	          selectors:
//	          - cel:
//	              expression: "device.attributes['neuron.aws.com'].resourceType == 'neuron_node'"
//	      config:
//	      - requests: ["neurons"]
//	        opaque:
//	          driver: neuron.aws.com
//	          parameters:
//	            apiVersion: neuron.aws.com/v1
//	            kind: UltraServerConfig
//	            ultraserverMode: 4
//
// examples/dra holds these and the other seed templates, each with a pod that uses it.
package v1
