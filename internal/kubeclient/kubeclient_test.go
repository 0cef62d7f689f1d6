package kubeclient

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

func TestProtobufCopiesAndSetsContentTypes(t *testing.T) {
	in := &rest.Config{Host: "https://example", QPS: 7}
	out := Protobuf(in)
	if out == in {
		t.Fatal("Protobuf changed the caller's config instead of a copy")
	}
	if in.ContentType != "" || in.AcceptContentTypes != "" {
		t.Errorf("the caller's config changed: %q, %q", in.ContentType, in.AcceptContentTypes)
	}
	if out.ContentType != runtime.ContentTypeProtobuf {
		t.Errorf("ContentType = %q, want %q", out.ContentType, runtime.ContentTypeProtobuf)
	}
	if want := "application/vnd.kubernetes.protobuf,application/json"; out.AcceptContentTypes != want {
		t.Errorf("AcceptContentTypes = %q, want %q", out.AcceptContentTypes, want)
	}
	if out.Host != in.Host || out.QPS != in.QPS {
		t.Errorf("the copy lost settings: %+v", out)
	}
}
