package fakeec2

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// checkTag checks a tag's key and value as EC2 does (the member prefix names a missing key).
func checkTag(prefix, key, value string) *apiError {
	switch {
	case key == "":
		return missing(prefix + ".Key")
	case len(key) > 128:
		return errorf(http.StatusBadRequest, "InvalidParameterValue", "Tag key exceeds the maximum length of 128 characters")
	case len(value) > 256:
		return errorf(http.StatusBadRequest, "InvalidParameterValue", "Tag value exceeds the maximum length of 256 characters")
	case strings.HasPrefix(strings.ToLower(key), "aws:"):
		return errorf(http.StatusBadRequest, "InvalidParameterValue", "Tag keys starting with 'aws:' are reserved for internal use")
	}
	return nil
}

// tagged returns the instances named by ResourceId.N, the resources of CreateTags and DeleteTags.
// An id that is not an instance's (i-...) is InvalidID: the fake tags instances only. An
// instance EC2 does not show yet (eventual consistency) is InvalidInstanceID.NotFound, as on
// EC2 right after RunInstances.
func (s *Server) tagged(form url.Values) ([]*instance, *apiError) {
	ids, aerr := list(form, "ResourceId")
	if aerr != nil {
		return nil, aerr
	}
	if len(ids) == 0 {
		return nil, missing("ResourceId")
	}
	if len(ids) > 1000 {
		return nil, invalidValue("ResourceId", strconv.Itoa(len(ids)), "Up to 1000 resource IDs may be given.")
	}
	var out []*instance
	var unknown []string
	for _, id := range ids {
		if !strings.HasPrefix(id, "i-") {
			return nil, errorf(http.StatusBadRequest, "InvalidID", "The ID '%s' is not valid", id)
		}
		in, ok := s.byID[id]
		if !ok || in.hidden {
			unknown = append(unknown, id)
			continue
		}
		if !slices.Contains(out, in) {
			out = append(out, in)
		}
	}
	if aerr := notFound(unknown); aerr != nil {
		return nil, aerr
	}
	return out, nil
}

// tagsOf reads Tag.N.Key and Tag.N.Value, in order; hasValue says whether Tag.N.Value was given.
func tagsOf(form url.Values) (keys, values []string, hasValue []bool, aerr *apiError) {
	idx, aerr := indices(form, "Tag")
	if aerr != nil {
		return nil, nil, nil, aerr
	}
	for _, m := range idx {
		tp := "Tag." + strconv.Itoa(m)
		if aerr := keysUnder(form, tp, "Key", "Value"); aerr != nil {
			return nil, nil, nil, aerr
		}
		key, value := form.Get(tp+".Key"), form.Get(tp+".Value")
		if aerr := checkTag(tp, key, value); aerr != nil {
			return nil, nil, nil, aerr
		}
		_, has := form[tp+".Value"]
		keys, values, hasValue = append(keys, key), append(values, value), append(hasValue, has)
	}
	return keys, values, hasValue, nil
}

// createTags adds the tags to the instances, or overwrites the values of keys they have.
func (s *Server) createTags(form url.Values, reqID string, dryRun bool) (any, *apiError) {
	keys, values, _, aerr := tagsOf(form)
	if aerr != nil {
		return nil, aerr
	}
	if len(keys) == 0 {
		return nil, missing("Tag")
	}
	for i, k := range keys {
		if slices.Contains(keys[:i], k) {
			return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "Duplicate tag key '%s' specified.", k)
		}
	}
	ins, aerr := s.tagged(form)
	if aerr != nil {
		return nil, aerr
	}
	for _, in := range ins {
		n := len(in.Tags)
		for _, k := range keys {
			if _, ok := in.Tags[k]; !ok {
				n++
			}
		}
		if n > 50 {
			return nil, errorf(http.StatusBadRequest, "TagLimitExceeded", "The maximum number of tags per resource is 50.")
		}
	}
	if dryRun {
		return nil, dryRunError
	}
	for _, in := range ins {
		for i, k := range keys {
			in.Tags[k] = values[i]
		}
	}
	return createTagsResponse{Xmlns: Namespace, RequestID: reqID, Return: true}, nil
}

// deleteTags removes the tags of the keys given (only where the value matches, when one is
// given), or every tag when no key is given.
func (s *Server) deleteTags(form url.Values, reqID string, dryRun bool) (any, *apiError) {
	keys, values, hasValue, aerr := tagsOf(form)
	if aerr != nil {
		return nil, aerr
	}
	ins, aerr := s.tagged(form)
	if aerr != nil {
		return nil, aerr
	}
	if dryRun {
		return nil, dryRunError
	}
	for _, in := range ins {
		if len(keys) == 0 {
			clear(in.Tags)
		}
		for i, k := range keys {
			if v, ok := in.Tags[k]; ok && (!hasValue[i] || v == values[i]) {
				delete(in.Tags, k)
			}
		}
	}
	return deleteTagsResponse{Xmlns: Namespace, RequestID: reqID, Return: true}, nil
}
