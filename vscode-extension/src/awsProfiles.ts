// AWS profiles and regions for the pickers, read the way the AWS CLI and boto3 read them.
//
// ~/.aws/config holds `[default]` and `[profile NAME]` sections (plus `[sso-session NAME]` and `[services NAME]`,
// which are not profiles; a bare `[NAME]` there is ignored by the SDKs too).  ~/.aws/credentials holds `[NAME]`
// sections, every one a profile.  AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE move the files.  We parse the INI
// ourselves: it is small, and reading it must never run anything (credential_process lines are just text here).
// No vscode import: unit-tested on strings.

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

export interface IniSection {
  name: string; // the header between the brackets, trimmed
  values: Record<string, string>; // keys lower-cased, as botocore's configparser does
}

/**
 * Sections of an AWS-style INI file.  Comments are whole lines starting with `#` or `;`.  Indented lines continue
 * the key above (nested `s3 =` blocks): they are not keys of the section.  A repeated section adds to the first.
 */
export function parseIni(text: string): IniSection[] {
  const sections: IniSection[] = [];
  const byName = new Map<string, IniSection>();
  let current: IniSection | undefined;
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.replace(/^\uFEFF/, '');
    const trimmed = line.trim();
    if (!trimmed || trimmed.startsWith('#') || trimmed.startsWith(';')) {
      continue;
    }
    const header = /^\[\s*([^\]]+?)\s*\]\s*$/.exec(trimmed);
    if (header && !/^\s/.test(line)) {
      const name = header[1];
      current = byName.get(name);
      if (!current) {
        current = { name, values: {} };
        byName.set(name, current);
        sections.push(current);
      }
      continue;
    }
    if (!current || /^\s/.test(line)) {
      continue; // before any section, or a nested sub-key
    }
    const eq = trimmed.search(/[=:]/);
    if (eq <= 0) {
      continue;
    }
    const key = trimmed.slice(0, eq).trim().toLowerCase();
    current.values[key] = trimmed.slice(eq + 1).trim();
  }
  return sections;
}

export interface AwsProfile {
  name: string;
  region?: string;
  /** How it signs in, for the picker's description. */
  kind: 'sso' | 'role' | 'process' | 'keys' | 'other';
  sources: Array<'config' | 'credentials'>;
  ssoSession?: string;
}

function profileKind(values: Record<string, string>): AwsProfile['kind'] {
  if (values.sso_session || values.sso_start_url) {
    return 'sso';
  }
  if (values.role_arn) {
    return 'role';
  }
  if (values.credential_process) {
    return 'process';
  }
  if (values.aws_access_key_id) {
    return 'keys';
  }
  return 'other';
}

/** The profile name a config-file section defines, or undefined when it defines none. */
export function configSectionProfile(section: string): string | undefined {
  if (section === 'default') {
    return 'default';
  }
  const m = /^profile\s+(.+)$/.exec(section);
  return m ? m[1].trim() : undefined;
}

/** Profiles from the config and credentials files' texts, `default` first, then by name. */
export function listProfiles(configText: string, credentialsText: string): AwsProfile[] {
  const byName = new Map<string, AwsProfile>();
  const add = (name: string, values: Record<string, string>, source: 'config' | 'credentials') => {
    const existing = byName.get(name);
    const kind = profileKind(values);
    if (existing) {
      existing.sources.push(source);
      existing.region ??= values.region || undefined;
      existing.ssoSession ??= values.sso_session || undefined;
      if (existing.kind === 'other') {
        existing.kind = kind;
      }
      return;
    }
    byName.set(name, { name, region: values.region || undefined, kind, sources: [source], ssoSession: values.sso_session || undefined });
  };
  for (const section of parseIni(configText)) {
    const name = configSectionProfile(section.name);
    if (name) {
      add(name, section.values, 'config');
    }
  }
  for (const section of parseIni(credentialsText)) {
    add(section.name, section.values, 'credentials');
  }
  return [...byName.values()].sort((a, b) => (a.name === 'default' ? -1 : b.name === 'default' ? 1 : a.name.localeCompare(b.name)));
}

export interface AwsFiles {
  config: string;
  credentials: string;
}

function expandHome(p: string, home: string): string {
  return p === '~' ? home : p.startsWith('~/') || p.startsWith('~\\') ? path.join(home, p.slice(2)) : p;
}

/** Where the SDKs look: AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/config and ~/.aws/credentials. */
export function awsFilePaths(env: NodeJS.ProcessEnv = process.env, home: string = os.homedir()): AwsFiles {
  return {
    config: expandHome(env.AWS_CONFIG_FILE?.trim() || path.join(home, '.aws', 'config'), home),
    credentials: expandHome(env.AWS_SHARED_CREDENTIALS_FILE?.trim() || path.join(home, '.aws', 'credentials'), home),
  };
}

function readText(file: string): string {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return ''; // missing or unreadable: no profiles from it
  }
}

/** The profiles on this machine (the extension host's: the remote's in a remote window, where the CLI runs too). */
export function readProfiles(env: NodeJS.ProcessEnv = process.env, home: string = os.homedir()): AwsProfile[] {
  const files = awsFilePaths(env, home);
  return listProfiles(readText(files.config), readText(files.credentials));
}

/** Whether either file exists: without them and without settings, the AWS status bar item stays hidden. */
export function hasAwsFiles(env: NodeJS.ProcessEnv = process.env, home: string = os.homedir()): boolean {
  const files = awsFilePaths(env, home);
  return fs.existsSync(files.config) || fs.existsSync(files.credentials);
}

/**
 * Commercial (aws partition) regions with a SageMaker API endpoint, from botocore 1.44's endpoints.json
 * (`api.sagemaker`).  A fixed list on purpose: listing regions would need credentials, which is what may be broken.
 */
export const SAGEMAKER_REGIONS: ReadonlyArray<{ id: string; name: string }> = [
  { id: 'us-east-1', name: 'US East (N. Virginia)' },
  { id: 'us-east-2', name: 'US East (Ohio)' },
  { id: 'us-west-1', name: 'US West (N. California)' },
  { id: 'us-west-2', name: 'US West (Oregon)' },
  { id: 'af-south-1', name: 'Africa (Cape Town)' },
  { id: 'ap-east-1', name: 'Asia Pacific (Hong Kong)' },
  { id: 'ap-east-2', name: 'Asia Pacific (Taipei)' },
  { id: 'ap-south-1', name: 'Asia Pacific (Mumbai)' },
  { id: 'ap-south-2', name: 'Asia Pacific (Hyderabad)' },
  { id: 'ap-southeast-1', name: 'Asia Pacific (Singapore)' },
  { id: 'ap-southeast-2', name: 'Asia Pacific (Sydney)' },
  { id: 'ap-southeast-3', name: 'Asia Pacific (Jakarta)' },
  { id: 'ap-southeast-4', name: 'Asia Pacific (Melbourne)' },
  { id: 'ap-southeast-5', name: 'Asia Pacific (Malaysia)' },
  { id: 'ap-southeast-6', name: 'Asia Pacific (New Zealand)' },
  { id: 'ap-southeast-7', name: 'Asia Pacific (Thailand)' },
  { id: 'ap-northeast-1', name: 'Asia Pacific (Tokyo)' },
  { id: 'ap-northeast-2', name: 'Asia Pacific (Seoul)' },
  { id: 'ap-northeast-3', name: 'Asia Pacific (Osaka)' },
  { id: 'ca-central-1', name: 'Canada (Central)' },
  { id: 'ca-west-1', name: 'Canada West (Calgary)' },
  { id: 'eu-central-1', name: 'Europe (Frankfurt)' },
  { id: 'eu-central-2', name: 'Europe (Zurich)' },
  { id: 'eu-west-1', name: 'Europe (Ireland)' },
  { id: 'eu-west-2', name: 'Europe (London)' },
  { id: 'eu-west-3', name: 'Europe (Paris)' },
  { id: 'eu-north-1', name: 'Europe (Stockholm)' },
  { id: 'eu-south-1', name: 'Europe (Milan)' },
  { id: 'eu-south-2', name: 'Europe (Spain)' },
  { id: 'il-central-1', name: 'Israel (Tel Aviv)' },
  { id: 'me-south-1', name: 'Middle East (Bahrain)' },
  { id: 'me-central-1', name: 'Middle East (UAE)' },
  { id: 'mx-central-1', name: 'Mexico (Central)' },
  { id: 'sa-east-1', name: 'South America (Sao Paulo)' },
];

/** Regions for the picker: the profile's own region first (even one not in the list), then the fixed list. */
export function regionChoices(profileRegion: string | undefined): Array<{ id: string; name: string; fromProfile: boolean }> {
  const out: Array<{ id: string; name: string; fromProfile: boolean }> = [];
  if (profileRegion) {
    out.push({ id: profileRegion, name: SAGEMAKER_REGIONS.find((r) => r.id === profileRegion)?.name ?? '', fromProfile: true });
  }
  for (const r of SAGEMAKER_REGIONS) {
    if (r.id !== profileRegion) {
      out.push({ ...r, fromProfile: false });
    }
  }
  return out;
}

/** A region id as AWS spells them (`eu-west-1`, `us-gov-west-1`): what the region input box accepts. */
export function isRegionId(text: string): boolean {
  return /^[a-z]{2}(-[a-z]+)+-\d+$/.test(text.trim());
}

export interface EffectiveAws {
  profile: string;
  profileFrom: 'setting' | 'environment' | 'default';
  region: string | undefined;
  regionFrom: 'setting' | 'environment' | 'profile' | undefined;
}

/**
 * The profile and region the CLI ends up with, as the SDK resolves them: the extension's settings (it sets
 * AWS_PROFILE / AWS_REGION from them), else the environment, else `default` and the profile's `region`.
 */
export function effectiveAws(
  settings: { profile: string; region: string },
  env: NodeJS.ProcessEnv,
  profiles: AwsProfile[],
): EffectiveAws {
  const fromEnv = env.AWS_PROFILE?.trim() || env.AWS_DEFAULT_PROFILE?.trim();
  const profile = settings.profile.trim() || fromEnv || 'default';
  const profileFrom = settings.profile.trim() ? 'setting' : fromEnv ? 'environment' : 'default';
  const envRegion = env.AWS_REGION?.trim() || env.AWS_DEFAULT_REGION?.trim();
  const profileRegion = profiles.find((p) => p.name === profile)?.region;
  if (settings.region.trim()) {
    return { profile, profileFrom, region: settings.region.trim(), regionFrom: 'setting' };
  }
  if (envRegion) {
    return { profile, profileFrom, region: envRegion, regionFrom: 'environment' };
  }
  return { profile, profileFrom, region: profileRegion, regionFrom: profileRegion ? 'profile' : undefined };
}
