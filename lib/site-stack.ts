import { existsSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { CfnOutput, Duration, Stack, type StackProps } from 'aws-cdk-lib';
import type { RestApi } from 'aws-cdk-lib/aws-apigateway';
import {
  AllowedMethods,
  CachePolicy,
  Distribution,
  HttpVersion,
  OriginRequestPolicy,
  ResponseHeadersPolicy,
  ViewerProtocolPolicy,
} from 'aws-cdk-lib/aws-cloudfront';
import { RestApiOrigin, S3BucketOrigin } from 'aws-cdk-lib/aws-cloudfront-origins';
import { BlockPublicAccess, Bucket, BucketEncryption, type IBucket } from 'aws-cdk-lib/aws-s3';
import { BucketDeployment, CacheControl, Source } from 'aws-cdk-lib/aws-s3-deployment';
import type { Construct } from 'constructs';
import { API_BASE } from '#core/endpoints.ts';
import { keptInProduction } from './removal.ts';
import { buckets } from './resources.ts';
import type { StageConfig } from './stage.ts';

export interface SiteStackProps extends StackProps {
  readonly stage: StageConfig;
  readonly api: RestApi;
  /** The static site's directory (default `site/`); deployed when it has files. */
  readonly siteDir?: string;
}

/** Where the usage report is served; the usage-report function writes this key (ARCHITECTURE.md §2). */
const USAGE_REPORT_PATH = `/${buckets.site.usageReportKey}`;

/**
 * The public face: the private site bucket (status page at its root, `usage.json`) and the CloudFront
 * distribution in front of it and of the API. `/v1/*` goes to the REST API uncached; `/usage.json` is cached
 * for a minute; everything else is the status page and its assets. The bucket is readable only by this
 * distribution (origin access control), which is why both live in one stack: the bucket policy names the
 * distribution, and the distribution the bucket.
 */
export class SiteStack extends Stack {
  readonly bucket: IBucket;
  readonly distribution: Distribution;

  constructor(scope: Construct, id: string, props: SiteStackProps) {
    super(scope, id, props);
    const { stage } = props;

    const bucket = new Bucket(this, 'site-bucket', {
      blockPublicAccess: BlockPublicAccess.BLOCK_ALL,
      encryption: BucketEncryption.S3_MANAGED,
      enforceSSL: true,
      removalPolicy: keptInProduction(stage.production),
      autoDeleteObjects: !stage.production,
    });
    this.bucket = bucket;

    const siteOrigin = S3BucketOrigin.withOriginAccessControl(bucket);
    const usageReportCache = new CachePolicy(this, 'usage-report-cache', {
      // Cache policy names are unique per account, not per region: the same stage in a second region needs its own.
      cachePolicyName: `${stage.prefix}-usage-report-${this.region}`,
      comment: 'usage.json: short-lived, the report is rebuilt on a schedule',
      minTtl: Duration.seconds(0),
      defaultTtl: Duration.seconds(60),
      maxTtl: Duration.minutes(5),
      enableAcceptEncodingGzip: true,
      enableAcceptEncodingBrotli: true,
    });
    this.distribution = new Distribution(this, 'cdn', {
      comment: `${stage.prefix}: status page, usage.json and the API`,
      defaultRootObject: 'index.html',
      httpVersion: HttpVersion.HTTP2_AND_3,
      defaultBehavior: {
        origin: siteOrigin,
        viewerProtocolPolicy: ViewerProtocolPolicy.REDIRECT_TO_HTTPS,
        cachePolicy: CachePolicy.CACHING_OPTIMIZED,
        // The status page's own: HSTS (for the whole host), nosniff, no framing by other sites (a <meta> CSP cannot
        // say frame-ancestors), a referrer policy. The API's behaviour keeps its functions' headers as they are.
        responseHeadersPolicy: ResponseHeadersPolicy.SECURITY_HEADERS,
      },
      additionalBehaviors: {
        [`${API_BASE}/*`]: {
          origin: new RestApiOrigin(props.api, {
            readTimeout: Duration.seconds(stage.cdnReadTimeoutSeconds),
          }),
          // A redirect would turn a POST into a GET; API clients get HTTPS or nothing.
          viewerProtocolPolicy: ViewerProtocolPolicy.HTTPS_ONLY,
          allowedMethods: AllowedMethods.ALLOW_ALL,
          cachePolicy: CachePolicy.CACHING_DISABLED,
          // Every viewer header (Authorization included) but Host: API Gateway routes on its own host name.
          originRequestPolicy: OriginRequestPolicy.ALL_VIEWER_EXCEPT_HOST_HEADER,
          // Compression buffers; streamed events must reach the client as they are written.
          compress: false,
        },
        [USAGE_REPORT_PATH]: {
          origin: siteOrigin,
          viewerProtocolPolicy: ViewerProtocolPolicy.REDIRECT_TO_HTTPS,
          cachePolicy: usageReportCache,
          responseHeadersPolicy: ResponseHeadersPolicy.SECURITY_HEADERS,
        },
      },
    });

    const siteDir = props.siteDir ?? fileURLToPath(new URL('../site/', import.meta.url));
    if (existsSync(siteDir) && readdirSync(siteDir).length > 0) {
      new BucketDeployment(this, 'site-content', {
        sources: [Source.asset(siteDir, { exclude: [USAGE_REPORT_PATH.slice(1)] })],
        destinationBucket: bucket,
        // usage.json is written by the usage-report function, not by deployments: never prune it.
        prune: false,
        cacheControl: [CacheControl.maxAge(Duration.minutes(5))],
      });
    }

    new CfnOutput(this, 'cdn-domain', { value: this.distribution.distributionDomainName });
    new CfnOutput(this, 'cdn-base-url', {
      value: `https://${this.distribution.distributionDomainName}/v1`,
      description: 'OpenAI base URL through CloudFront',
    });
    new CfnOutput(this, 'site-bucket-name', { value: bucket.bucketName });
  }
}
