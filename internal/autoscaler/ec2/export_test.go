package ec2

// SetPageSize sets DescribeInstances' MaxResults (EC2 accepts 5 to 1000; the provider uses 1000).
func SetPageSize(p *Provider, n int32) { p.pageSize = n }
