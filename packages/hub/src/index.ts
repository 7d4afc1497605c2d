export { HubError, type HubErrorCode, type HubErrorDetails } from "./errors.js";
export { parseHubReference, formatHubReference, isHubReference, HUB_PREFIX, DEFAULT_QUANT, type HubReference } from "./reference.js";
export { hubConfig, DEFAULT_ENDPOINT, type HubConfig, type HubEnvironment } from "./config.js";
export { HubClient, DEFAULT_RETRY, type RetryPolicy, type HubClientOptions } from "./http.js";
export { selectModel, modelGroups, quantOfFileName, type ModelGroup, type ModelSelection, type RepoFile } from "./select.js";
export { repoFolder, blobPath, snapshotPath } from "./cache.js";
export { downloadBlob, DEFAULT_CONNECTIONS, PARALLEL_FROM_BYTES, type BlobDownload, type DownloadProgress } from "./download.js";
export { RemoteSource, REMOTE_BLOCK_BYTES } from "./remote-source.js";
export {
  resolveHubModel,
  downloadHubModel,
  ensureHubModel,
  ensureHubProjector,
  filesToFetch,
  remoteModelSource,
  readHubModelHeader,
  hubClient,
  type HubModelFile,
  type ResolvedHubModel,
  type HubOptions,
  type ResolveOptions,
  type DownloadOptions,
} from "./resolve.js";
export { listCachedModels, removeCachedModel, type CachedModel, type CacheListing, type RemovedFromCache } from "./cached.js";
