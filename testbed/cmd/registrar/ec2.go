package main

// A small EC2 Query API client (the four read calls the registrar makes),
// signed with the AWS SDK's SigV4 signer so that the emulator sees the
// region and account a real client would send.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

type ec2Client struct {
	endpoint string
	region   string
	creds    aws.Credentials
	http     *http.Client
	signer   *v4.Signer
}

func newEC2(endpoint, region string) *ec2Client {
	return &ec2Client{
		endpoint: strings.TrimRight(endpoint, "/") + "/",
		region:   region,
		creds: aws.Credentials{
			AccessKeyID:     envOr("AWS_ACCESS_KEY_ID", "testing"),
			SecretAccessKey: envOr("AWS_SECRET_ACCESS_KEY", "testing"),
			SessionToken:    os.Getenv("AWS_SESSION_TOKEN"),
		},
		http:   &http.Client{Timeout: 30 * time.Second},
		signer: v4.NewSigner(),
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// call sends one Query API action and decodes its XML answer into out.
func (c *ec2Client) call(ctx context.Context, action string, params url.Values, out any) error {
	params.Set("Action", action)
	params.Set("Version", "2016-11-15")
	body := params.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	sum := sha256.Sum256([]byte(body))
	if err := c.signer.SignHTTP(ctx, c.creds, req, hex.EncodeToString(sum[:]), "ec2", c.region, time.Now()); err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("ec2:%s: %w", action, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ec2:%s: %s: %s", action, resp.Status, strings.TrimSpace(string(raw)))
	}
	return xml.Unmarshal(raw, out)
}

type tag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type instance struct {
	ID             string    `xml:"instanceId"`
	ImageID        string    `xml:"imageId"`
	Type           string    `xml:"instanceType"`
	State          string    `xml:"instanceState>name"`
	Zone           string    `xml:"placement>availabilityZone"`
	PrivateDNS     string    `xml:"privateDnsName"`
	PrivateIP      string    `xml:"privateIpAddress"`
	Architecture   string    `xml:"architecture"`
	LaunchTime     time.Time `xml:"launchTime"`
	RootDeviceName string    `xml:"rootDeviceName"`
	Tags           []tag     `xml:"tagSet>item"`
	Volumes        []struct {
		Device   string `xml:"deviceName"`
		VolumeID string `xml:"ebs>volumeId"`
	} `xml:"blockDeviceMapping>item"`
}

func (i *instance) tag(key string) string {
	for _, t := range i.Tags {
		if t.Key == key {
			return t.Value
		}
	}
	return ""
}

// instances lists the instances tagged for the cluster, in every state.
func (c *ec2Client) instances(ctx context.Context, cluster string) ([]instance, error) {
	var all []instance
	token := ""
	for {
		params := url.Values{}
		params.Set("Filter.1.Name", "tag:kubernetes.io/cluster/"+cluster)
		params.Set("Filter.1.Value.1", "owned")
		if token != "" {
			params.Set("NextToken", token)
		}
		var page struct {
			Reservations []struct {
				Instances []instance `xml:"instancesSet>item"`
			} `xml:"reservationSet>item"`
			NextToken string `xml:"nextToken"`
		}
		if err := c.call(ctx, "DescribeInstances", params, &page); err != nil {
			return nil, err
		}
		for _, r := range page.Reservations {
			all = append(all, r.Instances...)
		}
		if page.NextToken == "" {
			return all, nil
		}
		token = page.NextToken
	}
}

// userData is the instance's user data, decoded from base64 by the caller.
func (c *ec2Client) userData(ctx context.Context, id string) (string, error) {
	params := url.Values{}
	params.Set("InstanceId", id)
	params.Set("Attribute", "userData")
	var out struct {
		Value string `xml:"userData>value"`
	}
	if err := c.call(ctx, "DescribeInstanceAttribute", params, &out); err != nil {
		return "", err
	}
	return out.Value, nil
}

// instanceType is what the kubelet and the VPC CNI learn of the machine.
type instanceType struct {
	Name       string `xml:"instanceType"`
	VCPUs      int64  `xml:"vCpuInfo>defaultVCpus"`
	MemoryMiB  int64  `xml:"memoryInfo>sizeInMiB"`
	ENIs       int64  `xml:"networkInfo>maximumNetworkInterfaces"`
	IPv4PerENI int64  `xml:"networkInfo>ipv4AddressesPerInterface"`
	GPUs       []struct {
		Manufacturer string `xml:"manufacturer"`
		Count        int64  `xml:"count"`
	} `xml:"gpuInfo>gpus>item"`
	Architectures []string `xml:"processorInfo>supportedArchitectures>item"`
}

func (c *ec2Client) instanceType(ctx context.Context, name string) (*instanceType, error) {
	params := url.Values{}
	params.Set("InstanceType.1", name)
	var out struct {
		Types []instanceType `xml:"instanceTypeSet>item"`
	}
	if err := c.call(ctx, "DescribeInstanceTypes", params, &out); err != nil {
		return nil, err
	}
	if len(out.Types) != 1 {
		return nil, fmt.Errorf("ec2:DescribeInstanceTypes: %d answers for %s", len(out.Types), name)
	}
	return &out.Types[0], nil
}

// volumeGiB is the size of one EBS volume.
func (c *ec2Client) volumeGiB(ctx context.Context, id string) (int64, error) {
	params := url.Values{}
	params.Set("VolumeId.1", id)
	var out struct {
		Sizes []string `xml:"volumeSet>item>size"`
	}
	if err := c.call(ctx, "DescribeVolumes", params, &out); err != nil {
		return 0, err
	}
	if len(out.Sizes) != 1 {
		return 0, fmt.Errorf("ec2:DescribeVolumes: no volume %s", id)
	}
	return strconv.ParseInt(out.Sizes[0], 10, 64)
}

// templateData is the part of a launch template version the registrar reads.
type templateData struct {
	ImageID  string `xml:"imageId"`
	UserData string `xml:"userData"`
	Devices  []struct {
		Device  string `xml:"deviceName"`
		SizeGiB int64  `xml:"ebs>volumeSize"`
	} `xml:"blockDeviceMappingSet>item"`
}

// templates lists the latest version of every launch template.
func (c *ec2Client) templates(ctx context.Context) (map[string]templateData, error) {
	out := map[string]templateData{}
	token := ""
	for {
		params := url.Values{}
		params.Set("LaunchTemplateVersion.1", "$Latest")
		if token != "" {
			params.Set("NextToken", token)
		}
		var page struct {
			Versions []struct {
				ID   string       `xml:"launchTemplateId"`
				Data templateData `xml:"launchTemplateData"`
			} `xml:"launchTemplateVersionSet>item"`
			NextToken string `xml:"nextToken"`
		}
		if err := c.call(ctx, "DescribeLaunchTemplateVersions", params, &page); err != nil {
			return nil, err
		}
		for _, v := range page.Versions {
			out[v.ID] = v.Data
		}
		if page.NextToken == "" {
			return out, nil
		}
		token = page.NextToken
	}
}
