package main

import (
	"strings"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodelease "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

// podReadyAgain is what a kubelet's status manager does and KWOK's stages
// do not: a running pod whose Ready condition someone else set false (the
// node lifecycle controller does, for every pod of a node whose heartbeat
// it missed, for example while the API server restarted) is reported
// ready again once its kubelet is back, as its containers have no
// readiness probes.
const podReadyAgain = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: dovetail-testbed-pod-ready-again
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values: ['True']
  delay:
    durationMilliseconds: 1000
  next:
    statusTemplate: |
      conditions:
      - type: Ready
        status: "True"
        lastTransitionTime: {{ Now | Quote }}
      - type: ContainersReady
        status: "True"
        lastTransitionTime: {{ Now | Quote }}
`

// kwokStages is KWOK's configuration: its own default stages, as kwokctl
// configures a cluster with node leases, and podReadyAgain. Nodes become
// Ready and renew their Leases; pods bound to them start at once, Jobs'
// pods complete, and a deleted pod goes at once.
func kwokStages() (string, error) {
	docs := []string{
		nodefast.DefaultNodeInit,
		nodelease.DefaultNodeHeartbeatWithLease,
		podfast.DefaultPodReady,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
		podReadyAgain,
	}
	for i, d := range docs {
		docs[i] = strings.TrimSpace(d)
	}
	return strings.Join(docs, "\n---\n") + "\n", nil
}
