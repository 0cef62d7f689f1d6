package allocation

// MaxPublishedID is maxPublishedID for the tests of package allocation_test.
const MaxPublishedID = maxPublishedID
